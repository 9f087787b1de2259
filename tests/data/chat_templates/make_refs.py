#!/usr/bin/env python3
"""Writes the references tests/core/chat_template_test.cc and tests/core/jinja_test.cc hold tandem to.

  python3 tests/data/chat_templates/make_refs.py

refs.json: every template here (the *.jinja files and tandem's built-ins, read from core/chat_template.cc)
rendered over a set of conversations by Python's jinja2 exactly as Hugging Face's apply_chat_template renders
them: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols extension and
an extension for {% generation %} (transformers' AssistantTracker, which renders its body as it is), tojson as
json.dumps(ensure_ascii=False, ...), raise_exception and strftime_now (pinned to 2024-07-26 10:30:00). The
variables are those apply_chat_template passes: messages, tools (None when absent), documents (None),
add_generation_prompt, bos_token and eos_token, then the case's extra ones.

The messages are first put in the template's shape the way tandem's ChatTemplate::Render does (the
normalize() below mirrors it): content given as text parts is joined with "\\n" unless the template renders
parts itself, OpenAI's tool-call arguments (a JSON string) become the object unless the template only takes
the string, and a null content becomes "" unless the template needs the null. Both choices come from probe renders, whose outcome is recorded as "caps" and checked too.

engine_cases.json: single expressions and statements of the Jinja subset, rendered in the same environment,
with jinja2's output or the fact that it failed.

Needs python3-jinja2 (3.1.6 made the committed files). Not run by CI.
"""
import datetime
import json
import os
import re
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
NOW = datetime.datetime(2024, 7, 26, 10, 30, 0)
PROBE = "tandem-probe-7f3a"


class Generation(Extension):
    """{% generation %}...{% endgeneration %}, as transformers' AssistantTracker renders it outside training."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


ENV = make_env()


def render(template, messages, tools, add_generation_prompt, tokens, extra):
    ctx = {"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": add_generation_prompt}
    for key in ("bos_token", "eos_token"):
        if tokens.get(key) and key not in extra:
            ctx[key] = tokens[key]
    ctx.update(extra)
    return template.render(**ctx)


def shows_probe(template, messages, tokens):
    try:
        return PROBE in render(template, messages, None, False, tokens, {})
    except Exception:
        return False


def probe_caps(template, tokens):
    """ChatTemplate::ProbeCaps."""
    caps = {"typed_content": False, "object_arguments": True, "null_content": False}
    try:
        out = render(template, [{"role": "user", "content": [{"type": "text", "text": PROBE}]}], None, False, tokens, {})
        caps["typed_content"] = PROBE in out and "'type': 'text'" not in out and '"type": "text"' not in out
    except Exception:
        pass
    object_args = {"probe_arg": PROBE}
    for content in ("", None):
        for as_object in (True, False):
            call = {"id": "call12345", "type": "function",
                    "function": {"name": "probe_tool",
                                 "arguments": object_args if as_object else json.dumps(object_args)}}
            messages = [{"role": "user", "content": "hi"},
                        {"role": "assistant", "content": content, "tool_calls": [call]}]
            if shows_probe(template, messages, tokens):
                caps["object_arguments"] = as_object
                caps["null_content"] = content is None
                return caps
    return caps


def normalize(messages, caps):
    """ChatTemplate::Render's reshaping of OpenAI messages."""
    out = []
    for m in messages:
        m = json.loads(json.dumps(m))
        if "content" in m and m["content"] is None and not caps["null_content"]:
            m["content"] = ""
        if isinstance(m.get("content"), list) and not caps["typed_content"]:
            m["content"] = "\n".join(part["text"] for part in m["content"])
        for call in m.get("tool_calls") or []:
            fn = call.get("function")
            if not isinstance(fn, dict) or "arguments" not in fn:
                continue
            if caps["object_arguments"] and isinstance(fn["arguments"], str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except ValueError:
                    pass
            elif not caps["object_arguments"] and not isinstance(fn["arguments"], str):
                fn["arguments"] = json.dumps(fn["arguments"], ensure_ascii=False)
        out.append(m)
    return out


# ---- the conversations ----

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                      "days": {"type": "integer", "description": "Days ahead", "default": 0}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object",
                       "properties": {"query": {"type": "string"},
                                      "tags": {"type": "array", "items": {"type": "string"}}},
                       "required": ["query"]}}},
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
TOOL_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call12345", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}

CASES = [
    {"name": "system_user", "messages": [SYSTEM, {"role": "user", "content": "Hello!"}]},
    {"name": "user_only", "messages": [{"role": "user", "content": "What is 2+2?"}]},
    {"name": "multi_turn", "messages": [
        SYSTEM, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."}]},
    {"name": "multi_turn_no_generation_prompt", "add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}]},
    {"name": "non_ascii", "messages": [
        {"role": "system", "content": "Réponds en français, s'il te plaît. \"Quotes\" & <tags> \\ back\tslash"},
        {"role": "user", "content": "naïve café — 你好 🦙 Привет ☃\u2028line\nend  "},
        {"role": "assistant", "content": "  Très bien ! 👍  "},
        {"role": "user", "content": "ñ"}]},
    {"name": "content_parts", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}]}]},
    {"name": "tools_available", "tools": TOOLS, "messages": [
        SYSTEM, {"role": "user", "content": "What's the weather in Paris?"}]},
    {"name": "tool_call_round_trip", "tools": TOOLS, "messages": [
        SYSTEM, {"role": "user", "content": "What's the weather in Paris?"}, TOOL_CALL, TOOL_RESULT,
        {"role": "assistant", "content": "It is 21 °C and clear in Paris."},
        {"role": "user", "content": "Thanks!"}]},
    {"name": "tool_call_pending", "tools": TOOLS, "messages": [
        {"role": "user", "content": "What's the weather in Paris?"}, TOOL_CALL, TOOL_RESULT]},
    {"name": "two_tool_calls", "tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris and news about it?"},
        {"role": "assistant", "content": "", "tool_calls": [
            TOOL_CALL["tool_calls"][0],
            {"id": "call67890", "type": "function",
             "function": {"name": "search", "arguments": "{\"query\": \"Paris news\", \"tags\": [\"fr\"]}"}}]},
        TOOL_RESULT,
        {"role": "tool", "tool_call_id": "call67890", "content": "No news."}]},
    {"name": "reasoning_content", "messages": [
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "Yes, 17 is prime.",
         "reasoning_content": "17 has no divisors between 2 and 4."},
        {"role": "user", "content": "And 21?"}]},
    {"name": "reasoning_in_content", "add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "<think>\nCheck 2, 3.\n</think>\n\nYes."}]},
    {"name": "thinking_field", "add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Is 17 prime?"},
        {"role": "assistant", "content": "Yes.", "thinking": "Check 2, 3 and 4."}]},
    {"name": "enable_thinking_false", "extra": {"enable_thinking": False}, "messages": [
        {"role": "user", "content": "Quick answer: capital of France?"}]},
    {"name": "enable_thinking_true", "extra": {"enable_thinking": True}, "messages": [
        {"role": "user", "content": "Quick answer: capital of France?"}]},
    {"name": "reasoning_effort_high", "extra": {"reasoning_effort": "high"}, "messages": [
        {"role": "system", "content": "Answer tersely."}, {"role": "user", "content": "2+2?"}]},
    {"name": "not_alternating", "messages": [
        {"role": "user", "content": "one"}, {"role": "user", "content": "two"}]},
    {"name": "empty_system", "messages": [
        {"role": "system", "content": ""}, {"role": "user", "content": "Hi"}]},
]


def builtin_sources():
    """The built-in templates, taken from core/chat_template.cc so the two cannot drift apart."""
    src = open(os.path.join(ROOT, "core", "chat_template.cc")).read()
    out = {}
    for var, name in (("kChatml", "chatml"), ("kLlama3", "llama3"), ("kMistral", "mistral")):
        m = re.search(r"constexpr std::string_view %s = R\"\((.*?)\)\";" % var, src, re.S)
        out[name] = m.group(1)
    return out


# The special tokens of each model, from its tokenizer_config.json (an absent one is left out).
TOKENS = {
    "meta-llama-Llama-3.1-8B-Instruct": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.2-3B-Instruct": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "meta-llama-Llama-3.3-70B-Instruct": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    "Qwen-Qwen2.5-7B-Instruct": {"eos_token": "<|im_end|>"},
    "Qwen-Qwen3-0.6B": {"eos_token": "<|im_end|>"},
    "mistralai-Mistral-Nemo-Instruct-2407": {"bos_token": "<s>", "eos_token": "</s>"},
    "Mistral-Small-3.2-24B-Instruct-2506": {"bos_token": "<s>", "eos_token": "</s>"},
    "openai-gpt-oss-120b": {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"},
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": {"bos_token": "<｜begin▁of▁sentence｜>",
                                                 "eos_token": "<｜end▁of▁sentence｜>"},
    "microsoft-Phi-3.5-mini-instruct": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    "ibm-granite-granite-3.3-2B-Instruct": {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>"},
    "HuggingFaceTB-SmolLM3-3B": {"eos_token": "<|im_end|>"},
    "chatml": {"eos_token": "<|im_end|>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>"},
}


def make_refs():
    templates = {}
    for f in sorted(os.listdir(HERE)):
        if f.endswith(".jinja"):
            templates[f[:-len(".jinja")]] = {"file": f, "source": open(os.path.join(HERE, f)).read()}
    for name, source in builtin_sources().items():
        templates[name] = {"builtin": name, "source": source}
    out_templates = []
    out_cases = []
    for name, t in templates.items():
        tokens = TOKENS[name]
        tmpl = ENV.from_string(t["source"])
        caps = probe_caps(tmpl, tokens)
        entry = {"name": name, "caps": caps, "bos_token": tokens.get("bos_token", ""),
                 "eos_token": tokens.get("eos_token", "")}
        entry.update({k: v for k, v in t.items() if k != "source"})
        out_templates.append(entry)
        for case in CASES:
            agp = case.get("add_generation_prompt", True)
            tools = case.get("tools")
            extra = case.get("extra", {})
            rec = {"template": name, "case": case["name"], "messages": case["messages"], "tools": tools,
                   "add_generation_prompt": agp, "extra": extra}
            try:
                rec["expected"] = render(tmpl, normalize(case["messages"], caps), tools, agp, tokens, extra)
            except jinja2.exceptions.TemplateError as e:
                if type(e) is jinja2.exceptions.TemplateError:  # raise_exception
                    rec["error"] = str(e)
                else:
                    rec["error_kind"] = type(e).__name__
            except Exception as e:
                rec["error_kind"] = type(e).__name__
            out_cases.append(rec)
    with open(os.path.join(HERE, "refs.json"), "w") as f:
        json.dump({"jinja2": jinja2.__version__, "now": NOW.isoformat(), "templates": out_templates,
                   "cases": out_cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in out_cases if "expected" not in c)
    print(f"refs.json: {len(out_templates)} templates, {len(out_cases)} cases ({n_err} errors)")


# ---- engine cases: (template, context) pairs; the context defaults to CONTEXT ----

CONTEXT = {"xs": [1, 2, 3], "d": {"a": 1, "b": [1, 2]}, "s": "hello", "names": ["b", "A", "c"],
           "users": [{"name": "x", "age": 3}, {"name": "Y", "age": 1}], "n": None, "f": 1.5, "t": True,
           "empty": [], "text": "Line one\nLine two\n\nLine four"}

ENGINE_CASES = [line for line in open(os.path.join(HERE, "engine_cases.txt")).read().split("\n") if line]


def make_engine_cases():
    out = []
    for line in ENGINE_CASES:
        if line.startswith("#"):
            continue
        src = line.replace("\\n", "\n")
        rec = {"template": src}
        try:
            rec["expected"] = ENV.from_string(src).render(**CONTEXT)
        except jinja2.exceptions.TemplateError as e:
            rec["error_kind"] = type(e).__name__
            rec["error"] = str(e)
        except Exception as e:
            rec["error_kind"] = type(e).__name__
            rec["error"] = str(e)
        out.append(rec)
    with open(os.path.join(HERE, "engine_cases.json"), "w") as f:
        json.dump({"jinja2": jinja2.__version__, "context": CONTEXT, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"engine_cases.json: {len(out)} cases ({sum(1 for c in out if 'expected' not in c)} errors)")


if __name__ == "__main__":
    make_refs()
    make_engine_cases()
