"""Stdio MCP servers that misbehave, for tests/test_mcp_owner.py (the standard library only, no SDK):

    python tests/mcp_odd_server.py hang          # reads requests, never answers
    python tests/mcp_odd_server.py garbage       # writes a non-JSON line to stdout, then never answers
    python tests/mcp_odd_server.py exit          # says why on stderr and exits with code 7
    python tests/mcp_odd_server.py tasks         # answers; one of its tools requires MCP tasks
    python tests/mcp_odd_server.py until FILE    # the `tasks` server, silent until FILE exists

Every mode exits when its stdin closes, as a stdio server should.
"""

from __future__ import annotations

import json
import os
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "tasks"

TOOLS = [
    {
        "name": "plain",
        "description": "Answer at once.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
    {
        "name": "environment",
        "description": "Its working directory and the names of its environment variables.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "later",
        "description": "Only runs as an MCP task.",
        "inputSchema": {"type": "object", "properties": {}},
        "execution": {"taskSupport": "required"},
    },
    {
        "name": "either",
        "description": "Runs as a task or not.",
        "inputSchema": {"type": "object", "properties": {}},
        "execution": {"taskSupport": "optional"},
    },
]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict) -> dict | None:
    method, ident = request.get("method"), request.get("id")
    if ident is None:  # a notification
        return None
    if method == "initialize":
        result: dict = {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "odd", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call" and request["params"]["name"] == "plain":
        text = request["params"].get("arguments", {}).get("text", "")
        result = {"content": [{"type": "text", "text": f"plain: {text}"}]}
    elif method == "tools/call" and request["params"]["name"] == "environment":
        seen = {"cwd": os.getcwd(), "env": sorted(os.environ), "tag": os.environ.get("ODD_TAG", "")}
        result = {"content": [{"type": "text", "text": json.dumps(seen)}]}
    elif method == "ping":
        result = {}
    else:  # what a server does when a task-only tool is called without a task
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "tasks required"}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def main() -> None:
    if mode == "exit":
        sys.stderr.write("starting odd server\nError: FOO_API_KEY is not set\n")
        sys.exit(7)
    if mode == "garbage":
        sys.stdout.write("Serving HTTP on 0.0.0.0 port 8000 (http://0.0.0.0:8000/) ...\n")
        sys.stdout.flush()
    if mode == "hang":
        sys.stderr.write("loading the index...\n")
        sys.stderr.flush()
    while mode == "until" and not os.path.exists(sys.argv[2]):
        time.sleep(0.02)
    for line in sys.stdin:
        if not line.strip() or mode in ("hang", "garbage"):
            continue
        reply = answer(json.loads(line))
        if reply is not None:
            send(reply)


if __name__ == "__main__":
    main()
