#!/usr/bin/env python3
"""Build the seed corpora of the fuzz targets (fuzz/corpus/<target>/, git-ignored).

Seeds come from the shared real sessions ($CTXD_SHARED/sessions or ../shared/sessions relative to
the repository root) and the importers' test fixtures. Long strings are cut and long arrays
shortened so each seed is a few KB and still valid JSON of its format: the fuzzer mutates
structure, not megabytes of tool output.

    python3 fuzz/seed_corpus.py        # from the repository root
"""
import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("CTXD_SHARED", os.path.join(ROOT, "..", "shared"))
SOURCES = [os.path.join(SHARED, "sessions"), os.path.join(ROOT, "crates/ctxd-formats/tests/fixtures")]
OUT = os.path.join(ROOT, "fuzz", "corpus")
# import_family's first byte picks a format head (see fuzz_targets/import_family.rs).
FAMILY = {"pi": 0, "claude-code": 2, "claude_code": 2, "codex": 4, "api": 6}


def shrink(v, depth=0):
    if isinstance(v, str):
        return v if len(v) <= 120 else v[:100] + "…" + v[-10:]
    if isinstance(v, list):
        return [shrink(x, depth + 1) for x in v[:6]]
    if isinstance(v, dict):
        return {k: shrink(x, depth + 1) for k, x in v.items()}
    return v


def dumps(v):
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def seeds_of(path):
    """Yield (name, bytes, is_jsonl) seeds of one file."""
    raw = open(path, "rb").read()
    text = raw.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
        yield "doc", dumps(shrink(doc)).encode(), False
        yield "doc-pretty", json.dumps(shrink(doc), indent=2).encode()[:65536], False
        return
    except ValueError:
        pass
    lines = [l for l in text.splitlines() if l.strip()]
    parsed = []
    for l in lines:
        try:
            parsed.append(dumps(shrink(json.loads(l))))
        except ValueError:
            parsed.append(l[:400])
    # The head, a few windows through the file, and every distinct line shape once.
    yield "head", "\n".join(parsed[:24]).encode() + b"\n", True
    step = max(1, len(parsed) // 6)
    for i in range(step, len(parsed), step):
        yield f"win{i}", "\n".join(parsed[:2] + parsed[i:i + 12]).encode() + b"\n", True
    shapes = {}
    for p in parsed:
        try:
            o = json.loads(p)
            key = (o.get("type"), (o.get("payload") or {}).get("type") if isinstance(o.get("payload"), dict) else None,
                   (o.get("message") or {}).get("role") if isinstance(o.get("message"), dict) else None)
        except (ValueError, AttributeError):
            key = ("bad",)
        shapes.setdefault(key, p)
    yield "shapes", "\n".join(parsed[:1] + list(shapes.values())).encode() + b"\n", True


def family_of(path):
    parts = path.replace("\\", "/").split("/")
    for name, byte in FAMILY.items():
        if name in parts:
            return byte
    return None


def write(target, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# The gateway targets' first byte picks the API (see fuzz_targets/gateway_*.rs).
API_OF_PATH = {"/v1/messages": 0, "/v1/chat/completions": 1, "/v1/responses": 2}


def gateway_seeds():
    """Request bodies the real clients sent (shared/clients/captured), shrunk: for
    gateway_request the body; for gateway_parse_after two consecutive bodies of one capture
    laid out as that target reads them (the second sharing the first's prefix)."""
    captured = os.path.join(SHARED, "clients", "captured")
    if not os.path.isdir(captured):
        print(f"skipping missing {captured}", file=sys.stderr)
        return 0
    count = 0
    for fname in sorted(os.listdir(captured)):
        prev = {}
        for line in open(os.path.join(captured, fname), encoding="utf-8", errors="replace"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            api = API_OF_PATH.get((rec.get("path") or "").split("?")[0])
            if api is None or not isinstance(rec.get("body"), dict):
                continue
            body = dumps(shrink(rec["body"])).encode()
            write("gateway_request", body)
            before = prev.get(api)
            if before is not None and len(before) < 65536:
                keep = 0
                while keep < min(len(before), len(body)) and before[keep] == body[keep]:
                    keep += 1
                head = bytes([api]) + keep.to_bytes(2, "little") + len(before).to_bytes(2, "little")
                write("gateway_parse_after", head + before + body[keep:])
            prev[api] = body
            count += 1
    return count


def main():
    count = gateway_seeds()
    for src in SOURCES:
        if not os.path.isdir(src):
            print(f"skipping missing {src}", file=sys.stderr)
            continue
        for dirpath, _, files in os.walk(src):
            for fname in sorted(files):
                if fname.endswith(".md"):
                    continue
                path = os.path.join(dirpath, fname)
                fam = family_of(path)
                for _, data, jsonl in seeds_of(path):
                    write("import_any", data)
                    for knob in (0, 1, 3, 130):
                        write("report_any", bytes([knob]) + data)
                    if jsonl and fam is not None:
                        rest = data.split(b"\n", 1)[1] if b"\n" in data else b""
                        write("import_family", bytes([fam]) + rest)
                    count += 1
    print(f"{count} seeds written under {OUT}")


if __name__ == "__main__":
    main()
