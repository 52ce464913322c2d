"""A memory folder as the Agents SDK (Python) reads and writes it, for 4111-memory.sh. The rules
are the SDK's (src/agents/sandbox/memory/storage.py and manager.py), restated here:

    python3 memory-sdk.py check WORKSPACE   read an sbx-written folder by the SDK's rules
    python3 memory-sdk.py write WORKSPACE   write a folder the way the SDK writes one

check prints one line per finding, "ok WHAT" or "bad WHAT: why", and exits 1 on any "bad".
"""
import json
import os
import re
import sys

RAW_KEYS = ["rollout_id", "updated_at", "rollout_path", "rollout_summary_file", "terminal_state"]
SUMMARY_KEYS = ["session_id", "updated_at", "rollout_path", "terminal_state"]


def extract(doc, key):
    # storage.py _extract_metadata_value: the first line starting with "key:", stripped.
    for line in doc.splitlines():
        if line.startswith(key + ":"):
            return line[len(key) + 1:].strip()
    return ""


def header(doc):
    # manager.py _format_raw_memory / _format_rollout_summary: "key: value" lines, a blank
    # line, the text, one final newline.
    head, sep, body = doc.partition("\n\n")
    keys = [line.split(":", 1)[0] for line in head.split("\n")]
    return keys, sep, body


def check(ws):
    mem = os.path.join(ws, "memories")
    results = []

    def say(ok, what, why=""):
        results.append(ok)
        print(("ok " if ok else "bad ") + what + ("" if ok else ": " + why))

    # storage.py ensure_layout
    for d in ("raw_memories", "rollout_summaries", "skills"):
        say(os.path.isdir(os.path.join(mem, d)), "layout folder " + d, "missing")
    for f in ("MEMORY.md", "memory_summary.md"):
        say(os.path.isfile(os.path.join(mem, f)), "layout file " + f, "missing")
    items = []
    raw_dir = os.path.join(mem, "raw_memories")
    for name in sorted(os.listdir(raw_dir)):
        if not name.endswith(".md"):
            continue
        doc = open(os.path.join(raw_dir, name)).read()
        keys, sep, body = header(doc)
        say(keys == RAW_KEYS and sep and doc.endswith("\n") and not doc.endswith("\n\n"),
            "raw memory %s header" % name, "keys %s" % keys)
        # storage.py _extract_selection_item
        rid, summary = extract(doc, "rollout_id"), extract(doc, "rollout_summary_file")
        say(bool(rid and summary), "raw memory %s is selectable" % name,
            "rollout_id %r, rollout_summary_file %r" % (rid, summary))
        say(rid + ".md" == name, "raw memory %s is named by its rollout id" % name, rid)
        sp = os.path.join(mem, summary)
        say(summary.startswith("rollout_summaries/") and os.path.isfile(sp),
            "rollout_summary_file of %s resolves under the memories folder" % name, summary)
        rp = extract(doc, "rollout_path")
        say(os.path.isfile(os.path.join(ws, rp)), "rollout_path of %s names the rollout" % name, rp)
        if os.path.isfile(sp):
            sdoc = open(sp).read()
            skeys, ssep, _ = header(sdoc)
            say(skeys == SUMMARY_KEYS and ssep and extract(sdoc, "session_id") != "",
                "rollout summary %s header (session_id first)" % summary, "keys %s" % skeys)
        items.append({"rollout_id": rid, "updated_at": extract(doc, "updated_at"),
                      "rollout_path": rp, "rollout_summary_file": summary,
                      "terminal_state": extract(doc, "terminal_state"), "doc": doc})
    say(len(items) > 0, "there are raw memories", "none")
    # storage.py read_phase_two_selection / PhaseTwoSelectionItem.from_dict
    sel = json.load(open(os.path.join(mem, "phase_two_selection.json")))
    say(sel.get("version") == 1 and isinstance(sel.get("selected"), list),
        "phase_two_selection.json shape", json.dumps(sel)[:200])
    by_id = {i["rollout_id"]: i for i in items}
    for entry in sel.get("selected", []):
        rid = str(entry.get("rollout_id") or "").strip()
        want = by_id.get(rid, {})
        same = all(str(entry.get(k) or "").strip() == want.get(k) for k in RAW_KEYS)
        say(same, "selection entry %s matches its raw memory" % rid, json.dumps(entry))
    # storage.py rebuild_raw_memories: the selected raw memories, trailing newlines stripped,
    # joined by one blank line.
    joined = "\n\n".join(by_id[e["rollout_id"]]["doc"].rstrip("\n")
                         for e in sel.get("selected", []) if e.get("rollout_id") in by_id)
    got = open(os.path.join(mem, "raw_memories.md")).read()
    say(got == joined, "raw_memories.md joins the selection as the SDK does",
        "got %r, want %r" % (got[:120], joined[:120]))
    sys.exit(0 if all(results) else 1)


def write(ws, session_id="0d9c7f0e-5a1b-4c55-9b9e-3b1d2f6a7c11"):
    mem = os.path.join(ws, "memories")
    for d in ("raw_memories", "rollout_summaries", "skills"):
        os.makedirs(os.path.join(mem, d), exist_ok=True)
    os.makedirs(os.path.join(ws, "sessions"), exist_ok=True)
    rid, slug, at = "sdk-run-1", "deploy-notes", "2026-11-30T10:00:00+00:00"
    line = {"updated_at": at, "rollout_id": rid,
            "input": [{"role": "user", "content": "deploy it"}],
            "generated_items": [{"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": "Deployed."}]}],
            "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
            "final_output": "Deployed."}
    with open(os.path.join(ws, "sessions", rid + ".jsonl"), "w") as f:
        f.write(json.dumps(line, separators=(",", ":")) + "\n")
    summary_file = "rollout_summaries/%s_%s.md" % (rid, slug)
    raw = ("rollout_id: %s\nupdated_at: %s\nrollout_path: sessions/%s.jsonl\n"
           "rollout_summary_file: %s\nterminal_state: completed\n\n"
           "- SDK-LESSON: deploys go through make deploy\n") % (rid, at, rid, summary_file)
    with open(os.path.join(mem, "raw_memories", rid + ".md"), "w") as f:
        f.write(raw)
    with open(os.path.join(mem, summary_file), "w") as f:
        f.write("session_id: %s\nupdated_at: %s\nrollout_path: sessions/%s.jsonl\n"
                "terminal_state: completed\n\n# Deployed with make deploy\n" % (session_id, at, rid))
    with open(os.path.join(mem, "raw_memories.md"), "w") as f:
        f.write(raw.rstrip("\n"))
    with open(os.path.join(mem, "MEMORY.md"), "w") as f:
        f.write("# Task Group: deploy\n## Task 1: deploy\n### rollout_summary_files\n- %s\n"
                "### keywords\nmake deploy\n" % summary_file)
    with open(os.path.join(mem, "memory_summary.md"), "w") as f:
        f.write("## General Tips\nSDK-SUMMARY-7: deploy with make deploy\n")
    sel = {"version": 1, "updated_at": at,
           "selected": [{"rollout_id": rid, "updated_at": at,
                         "rollout_path": "sessions/%s.jsonl" % rid,
                         "rollout_summary_file": summary_file, "terminal_state": "completed"}]}
    with open(os.path.join(mem, "phase_two_selection.json"), "w") as f:
        f.write(json.dumps(sel, indent=2) + "\n")


if __name__ == "__main__":
    {"check": check, "write": write}[sys.argv[1]](sys.argv[2])
