"""Drives the loopback model server with the official `anthropic` and `openai` client
libraries and prints what they parsed as one JSON document.

The Rust test (`model_server_clients.rs`) scripts the server in the order of the calls below
and checks the document, so the server's streams are proven parseable by real clients."""

import json
import sys

import anthropic
import openai

base = sys.argv[1]
result = {}

TOOLS_A = [
    {"name": "read_file", "description": "read", "input_schema": {"type": "object"}},
    {"name": "bash", "description": "run", "input_schema": {"type": "object"}},
]
MSG = [{"role": "user", "content": "hello"}]

a = anthropic.Anthropic(base_url=base, api_key="k-anthropic", max_retries=0)

# 1. streamed text
with a.messages.stream(model="claude-test", max_tokens=64, messages=MSG) as s:
    text = "".join(s.text_stream)
    final = s.get_final_message()
result["a_text"] = text
result["a_text_stop"] = final.stop_reason
result["a_usage"] = [final.usage.input_tokens, final.usage.output_tokens]

# 2. streamed parallel tool calls, through the beta path (`?beta=true`, as Claude Code)
with a.beta.messages.stream(
    model="claude-test", max_tokens=64, messages=MSG, tools=TOOLS_A, extra_query={"beta": "true"}
) as s:
    final = s.get_final_message()
result["a_tools"] = [
    {"id": b.id, "name": b.name, "input": b.input} for b in final.content if b.type == "tool_use"
]
result["a_tools_text"] = "".join(b.text for b in final.content if b.type == "text")
result["a_tools_stop"] = final.stop_reason

# 3. not streamed
m = a.messages.create(model="claude-test", max_tokens=64, messages=MSG)
result["a_whole"] = "".join(b.text for b in m.content if b.type == "text")

# 4. 429 with retry-after
try:
    a.messages.create(model="claude-test", max_tokens=64, messages=MSG)
    result["a_429"] = None
except anthropic.RateLimitError as e:
    result["a_429"] = [e.status_code, e.response.headers.get("retry-after")]

# 5. a stream cut in the middle
try:
    with a.messages.stream(model="claude-test", max_tokens=64, messages=MSG) as s:
        "".join(s.text_stream)
        s.get_final_message()
    result["a_cut"] = None
except Exception as e:  # noqa: BLE001 - any failure is the point
    result["a_cut"] = type(e).__name__

o = openai.OpenAI(base_url=base + "/v1", api_key="k-openai", max_retries=0)

# 6. streamed text with usage
stream = o.chat.completions.create(
    model="gpt-test", messages=MSG, stream=True, stream_options={"include_usage": True}
)
text, finish, usage = "", None, None
for chunk in stream:
    if chunk.usage is not None:
        usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens]
    for choice in chunk.choices:
        if choice.delta.content:
            text += choice.delta.content
        if choice.finish_reason:
            finish = choice.finish_reason
result["o_text"] = text
result["o_text_finish"] = finish
result["o_usage"] = usage

# 7. streamed parallel tool calls, accumulated by the library's own stream helper
TOOLS_O = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
]
with o.chat.completions.stream(model="gpt-test", messages=MSG, tools=TOOLS_O) as s:
    for _ in s:
        pass
    completion = s.get_final_completion()
msg = completion.choices[0].message
result["o_tools"] = [
    {"id": c.id, "name": c.function.name, "arguments": json.loads(c.function.arguments)}
    for c in (msg.tool_calls or [])
]
result["o_tools_finish"] = completion.choices[0].finish_reason

# 8. not streamed
c = o.chat.completions.create(model="gpt-test", messages=MSG)
result["o_whole"] = c.choices[0].message.content

# 9. 503
try:
    o.chat.completions.create(model="gpt-test", messages=MSG)
    result["o_503"] = None
except openai.APIStatusError as e:
    result["o_503"] = e.status_code

# 10. a stream cut in the middle
try:
    for _ in o.chat.completions.create(model="gpt-test", messages=MSG, stream=True):
        pass
    result["o_cut"] = None
except Exception as e:  # noqa: BLE001
    result["o_cut"] = type(e).__name__

print(json.dumps(result))
