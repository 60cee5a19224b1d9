"""The official Python SDKs through the gateway: each conversation is two tool loops (user asks,
the mock calls the shell tool, the test answers with the tool's output, the mock says "done";
then a follow-up question and the same again), so four model requests and eight messages.
"""

import json
import subprocess

import anthropic
import openai

FOLLOW_UP = "now list them once more"
ANTHROPIC_MODEL = "claude-sonnet-4-5"
CHAT_MODEL = "gpt-4o-mini"
RESPONSES_MODEL = "gpt-5-mini"
# The SDKs retry on errors by default: a retry would hide a gateway error and skew the counts.
RETRIES = 0
TIMEOUT = 60

SHELL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string", "description": "The command to run"}},
    "required": ["command"],
}


def run_tool(name, arguments, repo, commands=("ls",)):
    """The one tool these conversations offer: `bash` running one of `commands` in the
    scratch repo."""
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    command = args.get("command")
    if name != "bash" or command not in commands:
        return "refused: only %s allowed here, got %s %r" % (" or ".join(map(repr, commands)), name, command)
    out = subprocess.run(["bash", "-c", command], cwd=repo, capture_output=True, text=True, timeout=10)
    return out.stdout


class Conversation:
    """What one SDK conversation did, for the checks."""

    def __init__(self, prompt):
        self.prompt = prompt
        self.finals = []  # the model's final text after each tool loop
        self.tool_calls = []  # tool names the model called, in order
        self.requests = 0
        self.history = []  # the conversation the client holds at the end (plain JSON)


def _loop(conv, ask, repo, prompts, commands=("ls",)):
    """Run `ask(messages) -> (reply_text, calls)` to completion for each prompt in turn.

    `ask` appends the assistant turn and returns the tool calls as (id, name, args); this loop
    appends the results through `answer` and stops at the first reply without calls. The tool
    runs only `commands`.
    """
    for prompt in prompts:
        ask.user(prompt)
        for _ in range(4):  # a tool loop here takes two requests; more means a runaway
            text, calls = ask.turn()
            conv.requests += 1
            if not calls:
                conv.finals.append(text)
                break
            for call_id, name, args in calls:
                conv.tool_calls.append(name)
                ask.result(call_id, run_tool(name, args, repo, commands))
        else:
            raise RuntimeError("the model never stopped calling tools")
    conv.history = _plain(getattr(ask, "messages", None) or getattr(ask, "input", None))
    return conv


def _plain(value):
    """The conversation as the client holds it, as plain JSON values (SDK objects dumped)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ------------------------------------------------------------------------ Anthropic Messages
class _Anthropic:
    def __init__(self, client, stream):
        self.client, self.stream, self.messages = client, stream, []
        self.tools = [{"name": "bash", "description": "Run a shell command", "input_schema": SHELL_SCHEMA}]

    def user(self, text):
        self.messages.append({"role": "user", "content": text})

    def turn(self):
        kwargs = dict(model=ANTHROPIC_MODEL, max_tokens=1024, tools=self.tools, messages=self.messages)
        if self.stream:
            with self.client.messages.stream(**kwargs) as s:
                for _ in s.text_stream:
                    pass
                msg = s.get_final_message()
        else:
            msg = self.client.messages.create(**kwargs)
        # The documented pattern: the response's content blocks go back as the assistant turn.
        self.messages.append({"role": "assistant", "content": msg.content})
        text = "".join(b.text for b in msg.content if b.type == "text")
        calls = [(b.id, b.name, b.input) for b in msg.content if b.type == "tool_use"]
        return text, calls

    def result(self, call_id, output):
        block = {"type": "tool_result", "tool_use_id": call_id, "content": output}
        last = self.messages[-1]
        if last["role"] == "user" and isinstance(last["content"], list):
            last["content"].append(block)
        else:
            self.messages.append({"role": "user", "content": [block]})


def anthropic_messages(base_url, repo, stream, prompts=None, commands=("ls",)):
    """Two tool loops (`prompts`: one per loop, by default the case's question and
    FOLLOW_UP)."""
    client = anthropic.Anthropic(
        api_key="sk-ant-ctxd-test", base_url=base_url, max_retries=RETRIES, timeout=TIMEOUT
    )
    prompt = "list the files (anthropic sdk, %s)" % ("streaming" if stream else "not streaming")
    prompts = prompts or [prompt, FOLLOW_UP]
    return _loop(Conversation(prompts[0]), _Anthropic(client, stream), repo, prompts, commands)


# ------------------------------------------------------------------------ Chat Completions
class _Chat:
    def __init__(self, client, stream):
        self.client, self.stream = client, stream
        self.messages = [{"role": "system", "content": "You are a terse assistant."}]
        self.tools = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command",
                                                        "parameters": SHELL_SCHEMA}}]

    def user(self, text):
        self.messages.append({"role": "user", "content": text})

    def turn(self):
        kwargs = dict(model=CHAT_MODEL, messages=self.messages, tools=self.tools)
        if not self.stream:
            msg = self.client.chat.completions.create(**kwargs).choices[0].message
            self.messages.append(msg.model_dump(exclude_none=True))
            calls = [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or []]
            return msg.content or "", calls
        text, calls = [], {}
        chunks = self.client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kwargs
        )
        for chunk in chunks:
            for choice in chunk.choices:
                d = choice.delta
                if d.content:
                    text.append(d.content)
                for tc in d.tool_calls or []:
                    c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                    c["id"] = tc.id or c["id"]
                    if tc.function:
                        c["name"] += tc.function.name or ""
                        c["arguments"] += tc.function.arguments or ""
        msg = {"role": "assistant", "content": "".join(text) or None}
        if calls:
            msg["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(calls.items())
            ]
        self.messages.append(msg)
        return "".join(text), [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]

    def result(self, call_id, output):
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})


def openai_chat(base_url, repo, stream, prompts=None, commands=("ls",)):
    client = openai.OpenAI(
        api_key="sk-openai-ctxd-test", base_url=base_url + "/v1", max_retries=RETRIES, timeout=TIMEOUT
    )
    prompt = "list the files (openai chat sdk, %s)" % ("streaming" if stream else "not streaming")
    prompts = prompts or [prompt, FOLLOW_UP]
    return _loop(Conversation(prompts[0]), _Chat(client, stream), repo, prompts, commands)


# ------------------------------------------------------------------------ Responses
class _Responses:
    def __init__(self, client, stream):
        self.client, self.stream, self.input = client, stream, []
        self.tools = [{"type": "function", "name": "bash", "description": "Run a shell command",
                       "parameters": SHELL_SCHEMA, "strict": False}]

    def user(self, text):
        self.input.append({"role": "user", "content": text})

    def turn(self):
        kwargs = dict(model=RESPONSES_MODEL, input=self.input, tools=self.tools, store=False)
        if self.stream:
            resp = None
            for event in self.client.responses.create(stream=True, **kwargs):
                if event.type == "response.completed":
                    resp = event.response
            if resp is None:
                raise RuntimeError("the stream ended without response.completed")
        else:
            resp = self.client.responses.create(**kwargs)
        # Stateless use (store=False): the output items go back in the next request's input.
        self.input += [item.model_dump(exclude_none=True) for item in resp.output]
        calls = [(i.call_id, i.name, i.arguments) for i in resp.output if i.type == "function_call"]
        return resp.output_text, calls

    def result(self, call_id, output):
        self.input.append({"type": "function_call_output", "call_id": call_id, "output": output})


def openai_responses(base_url, repo, stream, prompts=None, commands=("ls",)):
    client = openai.OpenAI(
        api_key="sk-openai-ctxd-test", base_url=base_url + "/v1", max_retries=RETRIES, timeout=TIMEOUT
    )
    prompt = "list the files (openai responses sdk, %s)" % ("streaming" if stream else "not streaming")
    prompts = prompts or [prompt, FOLLOW_UP]
    return _loop(Conversation(prompts[0]), _Responses(client, stream), repo, prompts, commands)


# ------------------------------------------------------------------------ Gemini (google-genai)
GEMINI_MODEL = "gemini-2.5-flash"
GEMINI_KEY = "AIza-ctxd-test"
GEMINI_SYSTEM = "You are a terse assistant."


def gemini_client(base_url, api_version=None):
    """google-genai on `base_url`: its default API version (`v1`) unless `api_version` is given;
    no retries (the SDK makes none by default; said here so it stays so)."""
    from google import genai
    from google.genai import types

    options = dict(base_url=base_url, timeout=TIMEOUT * 1000)
    if api_version:
        options["api_version"] = api_version
    return genai.Client(api_key=GEMINI_KEY, http_options=types.HttpOptions(**options))


class _Gemini:
    """The documented manual function-calling loop (automatic calling off): the response's
    content goes back as the model turn (its thought signatures with it), the tool's output as
    a `functionResponse` part in a user turn."""

    def __init__(self, client, stream):
        from google.genai import types

        self.types, self.client, self.stream, self.contents = types, client, stream, []
        bash = types.FunctionDeclaration(name="bash", description="Run a shell command",
                                         parameters_json_schema=SHELL_SCHEMA)
        self.config = types.GenerateContentConfig(
            system_instruction=GEMINI_SYSTEM,
            tools=[types.Tool(function_declarations=[bash])],
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )

    def user(self, text):
        self.contents.append(self.types.Content(role="user", parts=[self.types.Part(text=text)]))

    def turn(self):
        kwargs = dict(model=GEMINI_MODEL, contents=self.contents, config=self.config)
        if self.stream:
            parts = []
            for chunk in self.client.models.generate_content_stream(**kwargs):
                for c in chunk.candidates or []:
                    parts += (c.content.parts if c.content else None) or []
            content = self.types.Content(role="model", parts=parts)
        else:
            content = self.client.models.generate_content(**kwargs).candidates[0].content
        self.contents.append(content)
        parts = content.parts or []
        text = "".join(p.text for p in parts if p.text and not p.thought)
        # Gemini's calls carry no id (the name pairs a response with its call).
        calls = [(p.function_call.name, p.function_call.name, p.function_call.args) for p in parts
                 if p.function_call]
        return text, calls

    def result(self, call_id, output):
        part = self.types.Part.from_function_response(name=call_id, response={"output": output})
        last = self.contents[-1]
        if last.role == "user" and any(p.function_response for p in last.parts or []):
            last.parts.append(part)
        else:
            self.contents.append(self.types.Content(role="user", parts=[part]))

    @property
    def messages(self):
        return [c.model_dump(mode="json", exclude_none=True) for c in self.contents]


def gemini(base_url, repo, stream, prompts=None, commands=("ls",), api_version=None):
    """Two tool loops over google-genai (`api_version`: None for the SDK's default, `/v1`)."""
    client = gemini_client(base_url, api_version)
    prompt = "list the files (gemini sdk, %s, %s)" % ("streaming" if stream else "not streaming",
                                                       api_version or "default version")
    prompts = prompts or [prompt, FOLLOW_UP]
    return _loop(Conversation(prompts[0]), _Gemini(client, stream), repo, prompts, commands)
