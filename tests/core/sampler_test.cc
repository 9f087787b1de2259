// The sampler: greedy ties, determinism per seed, draw frequencies against the softmax (5-sigma bounds),
// which tokens top-k / top-p / min-p leave, the repetition, presence and frequency penalties, and no allocation
// while sampling.
#include "core/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <new>
#include <vector>

#include "tests/testutil.h"

// Counts heap allocations while `g_count_allocs` is set, to check that Sample never allocates.
namespace {
bool g_count_allocs = false;
size_t g_allocs = 0;
}  // namespace

// GCC pairs the malloc in operator new with the free below when both inline, and calls that a mismatch.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  if (g_count_allocs) ++g_allocs;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace tandem {
namespace {

SamplerOptions Plain(float temp, uint64_t seed = 42) {
  // Only what a test turns on: no top-k, top-p, min-p or penalty.
  return SamplerOptions{.temp = temp, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .repeat_penalty = 1.0f,
                        .repeat_last_n = 64, .seed = seed};
}

std::vector<double> Softmax(const std::vector<float>& logits, double temp) {
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp((logits[i] - mx) / temp);
  for (double& x : p) x /= sum;
  return p;
}

// Draw `n` tokens from fresh copies of `logits`; returns counts per id.
std::vector<int> Histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int> counts(logits.size(), 0);
  std::vector<float> work(logits.size());
  for (int i = 0; i < n; ++i) {
    work = logits;
    const int32_t id = s.Sample(work, {});
    EXPECT_GE(id, 0);
    EXPECT_LT(id, static_cast<int32_t>(logits.size()));
    if (id >= 0 && id < static_cast<int32_t>(logits.size())) ++counts[id];
  }
  return counts;
}

// Each frequency within 5 binomial standard deviations (plus a tiny floor for p near 0) of its probability.
void ExpectMatchesDistribution(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double freq = static_cast<double>(counts[i]) / n;
    const double sigma = std::sqrt(p[i] * (1 - p[i]) / n);
    EXPECT_NEAR(freq, p[i], 5 * sigma + 1e-9) << "token " << i;
  }
}

// Probabilities 0.5, 0.3, 0.15, 0.05 as logits.
const std::vector<float> kFour = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};

TEST(Argmax, TiesGoToLowestId) {
  EXPECT_EQ(Argmax(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{-5, -5, -5}), 0);
  EXPECT_EQ(Argmax(std::vector<float>{NAN, 0.5f, 0.5f}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{-INFINITY, -INFINITY, 7}), 2);
}

TEST(Sampler, TempZeroIsArgmaxWithTies) {
  Sampler s(Plain(0.0f), 4);
  std::vector<float> logits = {0.25f, 2.0f, 2.0f, -1.0f};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.Sample(logits, {}), 1);
  Sampler neg(Plain(-1.0f), 4);
  EXPECT_EQ(neg.Sample(logits, {}), 1);
}

TEST(Sampler, TopKOneEqualsGreedy) {
  SamplerOptions o = Plain(1.5f);
  o.top_k = 1;
  Sampler s(o, 512);
  for (uint64_t row = 0; row < 50; ++row) {
    std::vector<float> logits = test::RandomNormal(512, row, 2.0f);
    const int32_t want = Argmax(logits);
    EXPECT_EQ(s.Sample(logits, {}), want) << "row " << row;
  }
}

TEST(Sampler, SameSeedSameSequence) {
  const std::vector<float> base = test::RandomNormal(512, 7, 1.0f);
  SamplerOptions o;  // the defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05
  o.seed = 1234;
  Sampler a(o, 512), b(o, 512);
  o.seed = 1235;
  Sampler c(o, 512);
  std::vector<int32_t> seq_a, seq_b, seq_c;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> la = base, lb = base, lc = base;
    seq_a.push_back(a.Sample(la, {}));
    seq_b.push_back(b.Sample(lb, {}));
    seq_c.push_back(c.Sample(lc, {}));
  }
  EXPECT_EQ(seq_a, seq_b);
  EXPECT_NE(seq_a, seq_c);  // 200 draws over ~tens of candidates: equal only by astronomical chance
}

TEST(Sampler, DrawsFollowTheSoftmax) {
  const int n = 200000;
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -3.0f, 0.25f};
  for (float temp : {1.0f, 0.5f, 2.0f}) {
    Sampler s(Plain(temp, 99), static_cast<int>(logits.size()));
    ExpectMatchesDistribution(Histogram(s, logits, n), Softmax(logits, temp), n);
  }
}

TEST(Sampler, TopKKeepsTheKBest) {
  SamplerOptions o = Plain(1.0f);
  o.top_k = 2;
  Sampler s(o, 4);
  const int n = 100000;
  const std::vector<int> counts = Histogram(s, kFour, n);
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(counts[3], 0);
  ExpectMatchesDistribution(counts, {0.5 / 0.8, 0.3 / 0.8, 0, 0}, n);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  // Cumulative 0.5, 0.8, 0.95, 1: p = 0.7 keeps {0, 1}; p = 0.9 keeps {0, 1, 2}.
  const int n = 100000;
  SamplerOptions o = Plain(1.0f);
  o.top_p = 0.7f;
  Sampler s(o, 4);
  ExpectMatchesDistribution(Histogram(s, kFour, n), {0.5 / 0.8, 0.3 / 0.8, 0, 0}, n);
  o.top_p = 0.9f;
  Sampler s2(o, 4);
  ExpectMatchesDistribution(Histogram(s2, kFour, n), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n);
  // top-p sees temperature-1 probabilities: a hot temperature still keeps only {0, 1}, now nearly uniform.
  o.top_p = 0.7f;
  o.temp = 100.0f;
  Sampler hot(o, 4);
  const std::vector<float> two = {kFour[0], kFour[1]};
  ExpectMatchesDistribution(Histogram(hot, kFour, n), {Softmax(two, 100)[0], Softmax(two, 100)[1], 0, 0}, n);
}

TEST(Sampler, MinPDropsTokensBelowFractionOfTop) {
  // min_p 0.2 of the top 0.5 is 0.1: token 3 (0.05) goes, token 2 (0.15) stays.
  const int n = 100000;
  SamplerOptions o = Plain(1.0f);
  o.min_p = 0.2f;
  Sampler s(o, 4);
  ExpectMatchesDistribution(Histogram(s, kFour, n), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n);
  o.min_p = 0.61f;  // 0.305: only token 0 remains
  Sampler s2(o, 4);
  const std::vector<int> counts = Histogram(s2, kFour, 1000);
  EXPECT_EQ(counts[0], 1000);
}

TEST(Sampler, RepetitionPenaltyScalesRecentTokensOnce) {
  SamplerOptions o = Plain(0.0f);
  o.repeat_penalty = 2.0f;
  o.repeat_last_n = 3;
  Sampler s(o, 5);
  std::vector<float> logits = {2.0f, -1.0f, 1.9f, 0.5f, 1.8f};
  // Token 4 (1.8) is outside the 3-token window, so 2 (1.9) wins once 0 is halved. 0 appears twice but is
  // penalized once; 1 is negative, so it is multiplied.
  const std::vector<int32_t> history = {4, 0, 1, 0};
  EXPECT_EQ(s.Sample(logits, history), 2);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 1.9f, 0.5f, 1.8f}));
  // The scratch marks were cleared: the next call penalizes again from the original values.
  std::vector<float> again = {2.0f, -1.0f, 1.9f, 0.5f, 1.8f};
  EXPECT_EQ(s.Sample(again, history), 2);
  EXPECT_EQ(again[0], 1.0f);
  // Out-of-range history ids are ignored rather than trusted.
  std::vector<float> third = {2.0f, -1.0f, 1.9f, 0.5f, 1.8f};
  const std::vector<int32_t> bad = {-1, 17};
  EXPECT_EQ(s.Sample(third, bad), 0);
  EXPECT_EQ(third[0], 2.0f);

  o.repeat_penalty = 1.0f;  // disabled: logits untouched
  Sampler off(o, 5);
  std::vector<float> untouched = {2.0f, -1.0f, 1.9f, 0.5f, 1.8f};
  EXPECT_EQ(off.Sample(untouched, history), 0);
  EXPECT_EQ(untouched[0], 2.0f);
}

// Presence and frequency penalties (OpenAI's, as llama.cpp applies them) against values worked out by hand: a token
// seen c times in the window loses c * frequency + presence, after the repetition penalty has scaled it.
TEST(Sampler, PresenceAndFrequencyPenaltiesSubtractPerCount) {
  SamplerOptions o = Plain(0.0f);
  o.presence_penalty = 0.5f;
  o.frequency_penalty = 0.25f;
  o.repeat_last_n = 4;
  Sampler s(o, 5);
  // Window {1, 1, 2, 0}: counts 0:1, 1:2, 2:1; token 3 is outside it (first in the history), token 4 unseen.
  const std::vector<int32_t> history = {3, 1, 1, 2, 0};
  std::vector<float> logits = {1.0f, 2.0f, -1.0f, 0.5f, 0.7f};
  //   0: 1.0 - 1*0.25 - 0.5 = 0.25    1: 2.0 - 2*0.25 - 0.5 = 1.0    2: -1.0 - 0.25 - 0.5 = -1.75
  EXPECT_EQ(s.Sample(logits, history), 1);
  EXPECT_EQ(logits, (std::vector<float>{0.25f, 1.0f, -1.75f, 0.5f, 0.7f}));

  // With the repetition penalty too: scaled first (divided above 0, multiplied at or below), then subtracted.
  o.repeat_penalty = 2.0f;
  o.frequency_penalty = 1.0f;
  Sampler both(o, 5);
  std::vector<float> l2 = {1.0f, 2.0f, -1.0f, 0.5f, 0.7f};
  //   0: 1.0/2 - 1 - 0.5 = -1.0    1: 2.0/2 - 2 - 0.5 = -1.5    2: -1.0*2 - 1 - 0.5 = -3.5
  EXPECT_EQ(both.Sample(l2, history), 4);
  EXPECT_EQ(l2, (std::vector<float>{-1.0f, -1.5f, -3.5f, 0.5f, 0.7f}));
  // The counts were cleared: the same call again gives the same values.
  std::vector<float> l3 = {1.0f, 2.0f, -1.0f, 0.5f, 0.7f};
  both.Sample(l3, history);
  EXPECT_EQ(l3, l2);

  // Negative penalties (OpenAI allows -2..2) make seen tokens more likely.
  o = Plain(0.0f);
  o.presence_penalty = -1.5f;
  Sampler boost(o, 5);
  std::vector<float> l4 = {1.0f, 2.0f, -1.0f, 0.5f, 2.4f};
  EXPECT_EQ(boost.Sample(l4, history), 1);  // 2.0 + 1.5 = 3.5 beats the unseen 2.4
  EXPECT_EQ(l4[0], 2.5f);
}

TEST(Sampler, SampleDoesNotAllocate) {
  SamplerOptions o;  // every stage on
  o.repeat_penalty = 1.1f;
  o.presence_penalty = 0.3f;
  o.frequency_penalty = 0.2f;
  Sampler s(o, 32000);
  std::vector<float> logits = test::RandomNormal(32000, 3, 3.0f);
  std::vector<float> work(logits.size());
  const std::vector<int32_t> history = {5, 17, 31999, 5, 100};
  work = logits;
  s.Sample(work, history);  // warm-up
  g_allocs = 0;
  g_count_allocs = true;
  for (int i = 0; i < 20; ++i) {
    std::copy(logits.begin(), logits.end(), work.begin());
    s.Sample(work, history);
  }
  g_count_allocs = false;
  EXPECT_EQ(g_allocs, 0u);
}

}  // namespace
}  // namespace tandem
