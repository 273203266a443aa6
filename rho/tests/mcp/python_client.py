"""Drives `rho mcp` with the official MCP Python SDK (the real client, not a mock).

Usage: python_client.py SCENARIO

The server command comes from RHO_MCP_COMMAND (a JSON argv); the workspace is the current
directory. Each scenario asserts what it checks and prints `ok: <fact>` lines; any failed
check raises, so the process exits non-zero with the reason.
"""

import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
import mcp.types as types

HELLO = ".rho/workflows/hello/workflow.star"


def server_params(extra_args=()):
    argv = json.loads(os.environ["RHO_MCP_COMMAND"])
    env = {k: os.environ[k] for k in ("RHO_HOME", "HOME", "PATH", "RHO_PLANNER_WORKER", "RHO_PERMISSION_MODE") if k in os.environ}
    return StdioServerParameters(command=argv[0], args=argv[1:] + list(extra_args), env=env, cwd=os.getcwd())


def text_of(result):
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def check(condition, message):
    if not condition:
        raise AssertionError(message)
    print(f"ok: {message}", flush=True)


class Notices:
    def __init__(self):
        self.items = []
        self.event = anyio.Event()

    async def __call__(self, params):
        self.items.append(params)
        self.event.set()

    async def wait_for(self, run_id, seconds=60):
        with anyio.fail_after(seconds):
            while True:
                for item in self.items:
                    data = item.data if isinstance(item.data, dict) else {}
                    if data.get("kind") == "workflow_completed" and data.get("result", {}).get("run_id") == run_id:
                        return data
                self.event = anyio.Event()
                await self.event.wait()


def accepting(answers):
    async def callback(context, params):
        answers.append(params)
        return types.ElicitResult(action="accept", content={"confirm": True})
    return callback


def answering(action, answers):
    async def callback(context, params):
        answers.append(params)
        return types.ElicitResult(action=action)
    return callback


async def plan_hello(session):
    planned = await session.call_tool("workflow", {"action": "plan", "file": HELLO})
    check(not planned.is_error, "plan succeeds: " + text_of(planned).splitlines()[0])
    return planned.structured_content["plan_id"]


async def full_session():
    notices = Notices()
    answers = []
    async with stdio_client(server_params()) as (read, write):
        async with ClientSession(read, write, elicitation_callback=accepting(answers), logging_callback=notices) as session:
            # Claude Code probes server/discover before initialize: it must get an error, not a hang.
            try:
                with anyio.fail_after(10):
                    await session.send_discover("2026-07-28")
                raise AssertionError("server/discover was answered with a result")
            except AssertionError:
                raise
            except Exception as err:  # an MCPError carrying the JSON-RPC error
                check(True, f"server/discover is answered with a JSON-RPC error ({type(err).__name__})")
            init = await session.initialize()
            check(init.protocol_version == "2025-11-25", f"protocol {init.protocol_version} negotiated")
            check("Permission mode: bypass" in (init.instructions or ""), "instructions name the permission mode")

            tools = (await session.list_tools()).tools
            by_name = {tool.name: tool for tool in tools}
            check("workflow" in by_name, "tools/list offers workflow")
            schema = by_name["workflow"].input_schema
            check(schema.get("additionalProperties") is False, "the workflow schema rejects unknown fields")
            check(set(schema["properties"]["action"]["enum"]) == {"validate", "plan", "run", "status", "cancel", "resume"}, "the six actions are listed")
            if os.environ.get("RHO_EXPECT_PROCESS_TOOL"):
                check("process" in by_name, "tools/list offers process")

            validated = await session.call_tool("workflow", {"action": "validate", "file": HELLO})
            check(not validated.is_error and "valid: workflow `hello`" in text_of(validated), "validate reports the workflow valid")

            bad = await session.call_tool("workflow", {"action": "validate", "file": HELLO, "colour": "red"})
            check(bad.is_error and "colour" in text_of(bad), "an unknown field is an error naming it")

            plan_id = await plan_hello(session)
            started = await session.call_tool("workflow", {"action": "run", "plan_id": plan_id})
            check(not started.is_error, "run starts: " + text_of(started).splitlines()[0])
            run_id = started.structured_content["run_id"]
            check(len(answers) == 1 and plan_id in answers[0].message, "consent was asked naming the plan")
            check("sha256:" in answers[0].message, "consent names the digest")
            notice = await notices.wait_for(run_id)
            check("outcome success" in notice["summary"], "a completion notification arrived")
            status = await session.call_tool("workflow", {"action": "status", "run_id": run_id})
            check("outcome: success" in text_of(status) and "lifecycle: completed" in text_of(status), "status shows the completed run")
            print("RUN_ID=" + run_id, flush=True)

            if os.environ.get("RHO_EXPECT_PROCESS_TOOL"):
                started = await session.call_tool("process", {"action": "start", "command": "echo polled-from-python; sleep 0.2"})
                check(not started.is_error, "process start succeeds")
                process_id = started.structured_content["process_id"]
                seen = ""
                for _ in range(50):
                    polled = await session.call_tool("process", {"action": "poll", "process_id": process_id, "wait_seconds": 1})
                    check(not polled.is_error, "process poll succeeds") if not seen else None
                    seen += json.dumps(polled.structured_content)
                    if "polled-from-python" in seen and polled.structured_content.get("state") == "exited":
                        break
                check("polled-from-python" in seen, "the process output came back through poll")


async def refused_session(action):
    answers = []
    callback = answering(action, answers) if action else None
    async with stdio_client(server_params()) as (read, write):
        async with ClientSession(read, write, elicitation_callback=callback) as session:
            await session.initialize()
            plan_id = await plan_hello(session)
            result = await session.call_tool("workflow", {"action": "run", "plan_id": plan_id})
            text = text_of(result)
            check(result.is_error, f"run is refused ({action or 'no elicitation capability'}): {text}")
            check("Nothing was run and no run was stored" in text, "the refusal says nothing ran")
            check(f"rho workflow run {plan_id} --yes" in text, "the refusal says how to run it")
            if action == "decline":
                check("declined" in text, "the refusal says the user declined")
            elif action == "cancel":
                check("cancelled" in text, "the refusal says the client cancelled")
            else:
                check("elicitation capability" in text, "the refusal says the client cannot be asked")
            check(len(answers) == (1 if action else 0), "the client was asked exactly as often as it could be")


async def plan_mode_session():
    async with stdio_client(server_params(["--permission-mode", "plan"])) as (read, write):
        async with ClientSession(read, write, elicitation_callback=accepting([])) as session:
            init = await session.initialize()
            check("Permission mode: plan" in (init.instructions or ""), "instructions say plan mode")
            plan_id = await plan_hello(session)
            result = await session.call_tool("workflow", {"action": "run", "plan_id": plan_id})
            check(result.is_error and "denied by policy" in text_of(result), "plan mode denies the run by policy")


def main():
    scenario = sys.argv[1]
    if scenario == "full":
        anyio.run(full_session)
    elif scenario in ("decline", "cancel"):
        anyio.run(refused_session, scenario)
    elif scenario == "no-elicitation":
        anyio.run(refused_session, None)
    elif scenario == "plan-mode":
        anyio.run(plan_mode_session)
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()
