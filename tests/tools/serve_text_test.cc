// The server's completion text: stop strings (within a piece, spanning pieces, several at once) cut the text before
// them, nothing that could still become a stop string is handed out for streaming, no UTF-8 character is split,
// and what is streamed always concatenates to the final text.
#include "tools/serve_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem::serve {
namespace {

// Appends the pieces one by one, collecting what each step hands out; `all` at the end as the slot does.
struct Streamed {
  std::vector<std::string> steps;
  std::string joined;
  bool stopped = false;
};
Streamed Feed(CompletionText& t, const std::vector<std::string>& pieces) {
  Streamed s;
  for (const std::string& p : pieces) {
    s.stopped = t.Append(p);
    s.steps.emplace_back(t.TakeReady());
    s.joined += s.steps.back();
    if (s.stopped) break;
  }
  s.joined += t.TakeReady(/*all=*/true);
  return s;
}

TEST(CompletionText, NoStopsHandsOutEverything) {
  CompletionText t({});
  const Streamed s = Feed(t, {"Once", " upon", " a", " time"});
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.steps, (std::vector<std::string>{"Once", " upon", " a", " time"}));
  EXPECT_EQ(t.text(), "Once upon a time");
}

TEST(CompletionText, StopInsideOnePieceCutsBeforeIt) {
  CompletionText t({"Lily"});
  const Streamed s = Feed(t, {" named", " Lily.", " She"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(t.text(), " named ");
  EXPECT_EQ(s.joined, " named ");
}

// "ere was a" begins inside " there" and ends inside " a": what might be its start is held until it is resolved.
TEST(CompletionText, StopSpanningPiecesIsNeverStreamed) {
  CompletionText t({"ere was a"});
  const Streamed s = Feed(t, {",", " there", " was", " a", " little"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(t.text(), ", th");
  EXPECT_EQ(s.joined, ", th");
  EXPECT_EQ(s.steps[0], ",");
  EXPECT_EQ(s.steps[1], " th");  // "ere" could begin the stop string: held
  EXPECT_EQ(s.steps[2], "");     // "ere was" still could
}

// A held prefix that turns out not to be a stop is released as soon as that is known.
TEST(CompletionText, HeldPrefixIsReleasedWhenItIsNotAStop) {
  CompletionText t({"girl"});
  const Streamed s = Feed(t, {" little", " g", "ood", " dog"});
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.steps[1], " ");     // " g": the g is held
  EXPECT_EQ(s.steps[2], "good");  // "good" is not "girl"
  EXPECT_EQ(t.text(), " little good dog");
  EXPECT_EQ(s.joined, t.text());
}

// At the end (max_tokens), what was held goes out: it never became a stop string.
TEST(CompletionText, HeldPrefixGoesOutAtTheEnd) {
  CompletionText t({"girl"});
  const Streamed s = Feed(t, {" little", " gi"});
  EXPECT_FALSE(s.stopped);
  EXPECT_EQ(s.joined, " little gi");
}

TEST(CompletionText, EarliestOfSeveralStopsWins) {
  CompletionText t({"named", "little", "", "Lily"});  // the empty one is ignored
  const Streamed s = Feed(t, {" a little girl named Lily"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(t.text(), " a ");
}

TEST(CompletionText, StopAtTheVeryStartGivesNothing) {
  CompletionText t({"\n\n"});
  const Streamed s = Feed(t, {"\n", "\n", "more"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(t.text(), "");
  EXPECT_EQ(s.joined, "");
}

// A stop string that overlaps itself ("aab" inside "aaab") is found where it begins, not missed.
TEST(CompletionText, OverlappingStopIsFound) {
  CompletionText t({"aab"});
  const Streamed s = Feed(t, {"a", "a", "a", "b", "c"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(t.text(), "a");
  EXPECT_EQ(s.joined, "a");
}

// "é" is C3 A9, "€" E2 82 AC: byte pieces of a character are held until it is whole.
TEST(CompletionText, Utf8CharactersAreNotSplit) {
  CompletionText t({});
  const Streamed s = Feed(t, {"caf", "\xC3", "\xA9", " ", "\xE2\x82", "\xAC", "!"});
  EXPECT_EQ(s.steps, (std::vector<std::string>{"caf", "", "\xC3\xA9", " ", "", "\xE2\x82\xAC", "!"}));
  EXPECT_EQ(s.joined, "caf\xC3\xA9 \xE2\x82\xAC!");
}

// Generation cut inside a character: the end hands out the incomplete bytes too (the JSON writer replaces them).
TEST(CompletionText, IncompleteCharacterAtTheEndIsFlushed) {
  CompletionText t({});
  const Streamed s = Feed(t, {"ok", "\xF0\x9F"});
  EXPECT_EQ(s.steps[1], "");
  EXPECT_EQ(s.joined, "ok\xF0\x9F");
}

TEST(CompleteUtf8Prefix, Boundaries) {
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3"), 1u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3\xA9"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x98\x80"), 4u);
  EXPECT_EQ(CompleteUtf8Prefix("\x80\x80"), 2u);  // stray continuation bytes: nothing to wait for
  EXPECT_EQ(CompleteUtf8Prefix("a\xFF"), 2u);     // an invalid byte counts as whole
}

// Whatever the pieces, the streamed steps concatenate to the final text (checked over many cuts of one text).
TEST(CompletionText, StreamedAlwaysEqualsFinal) {
  const std::string story = "Once there was a girl named Lily. She said \xE2\x80\x9Chi\xE2\x80\x9D and left. The end.";
  const std::vector<std::string> stops = {"Lily", "end.", "xyz", "\xE2\x80\x9D"};
  for (size_t step = 1; step <= 7; ++step) {
    for (size_t s = 0; s < stops.size(); ++s) {
      std::vector<std::string> pieces;
      for (size_t i = 0; i < story.size(); i += step) pieces.push_back(story.substr(i, step));
      CompletionText t({stops[s]});
      const Streamed got = Feed(t, pieces);
      const size_t at = story.find(stops[s]);
      EXPECT_EQ(t.text(), story.substr(0, at)) << "step " << step << " stop " << s;
      EXPECT_EQ(got.joined, t.text()) << "step " << step << " stop " << s;
    }
  }
}

}  // namespace
}  // namespace tandem::serve
