"""ctxd's own tools end to end (issue 13): each client does one task while the strict mock,
scripted through `POST /_mock/script`, has the model call ctxd's tools around the client's own.

One prompt, three client requests, eight upstream requests:

    client #1 (the prompt)    -> notes_write   (a hidden round: the gateway answers, continues)
      continuation            -> the client's shell tool, with a command whose output carries a
                                 marker the command line does not ("$((6*7))" prints 42)
    client #2 (its output)    -> new_context   (the window is cut here)
      continuation (the boot) -> notes_read
      continuation            -> history_search_contents for the marker
      continuation            -> `wait`: the harness reads the item id in the search's answer
                                 from the mock's record and queues recall(that id) + the shell
      continuation            -> the client's shell tool again ("ls")
    client #3 (its output)    -> the mock's built-in final answer, "done"

The client sees two calls of its own shell tool and "done"; everything else is ctxd's.
"""

import json
import re

from harness import conversation, exchanges, is_model_request

# The first line of the boot a new window starts with (ctxd-core's windows/boot.rs).
BOOT_MARK = "Your context was reset"
# Upstream requests: which client request each one serves (the others are continuations).
SERVES = (0, 0, 1, 1, 1, 1, 1, 2)
RESET_AT = 3  # the continuation after new_context: the first request of the new window
CTXD_SCRIPTED = ("notes_write", "new_context", "notes_read", "history_search_contents", "recall")
ITEM_ID = re.compile(r'"item_id"\s*:\s*"(i_[0-9a-zA-Z_-]+)"')


class Scenario:
    """The script of one case; `tag` makes every text it plants unique in the run."""

    def __init__(self, tag, shell_name, shell_args, arithmetic=True):
        self.tag = tag
        self.shell_name = shell_name
        self._shell_args = shell_args  # command -> the shell tool's arguments
        self.prompt = "list the files, keeping notes (ctxd tools, %s)" % tag
        self.note_path = "e2e-%s.md" % tag
        self.note_text = "NOTE-%s: the task is to list the files" % tag
        self.marker = "CTXD-OUT-42-%s" % tag
        self.command = "ls && echo CTXD-OUT-$((6*7))-%s" % tag
        if not arithmetic:  # Gemini CLI refuses any `$(` as command substitution
            self.command = "ls && printf 'CTXD-OUT-%%s-%s\\n' 42" % tag

    def _shell(self, command):
        return "tool:%s:%s" % (self.shell_name, json.dumps(self._shell_args(command)))

    def specs(self):
        """The replies queued before the client starts, up to the held request."""
        return [
            "tool:notes_write:" + json.dumps({"path": self.note_path, "text": self.note_text}),
            self._shell(self.command),
            "tool:new_context:{}",
            "tool:notes_read:" + json.dumps({"path": self.note_path}),
            "tool:history_search_contents:" + json.dumps({"query": self.marker}),
            "wait:120000",
        ]

    def recall_specs(self, found):
        """The held request's reply and the next: recall the item the search found."""
        item_id, _ = found
        return ["tool:recall:" + json.dumps({"entryId": item_id}), self._shell("ls")]

    def commands(self):
        return (self.command, "ls")


def search_answer(requests):
    """(item id, request index): the first item id in the answer of a history_search_contents
    call the mock has received, or None."""
    model = [r for r in requests if is_model_request(r["method"], r["path"])]
    for i, r in enumerate(model):
        try:
            doc = json.loads(r["decoded"])
        except ValueError:
            continue
        for ex in exchanges(r["path"], conversation(r["path"], doc)):
            if ex["name"] == "history_search_contents" and ex["result"]:
                m = ITEM_ID.search(ex["result"])
                if m:
                    return m.group(1), i
    return None
