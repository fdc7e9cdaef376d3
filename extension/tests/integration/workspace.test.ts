// The workspace against the real pi-repl binary and a real kernel (no pi): start, stream, cancel,
// deaths reported once and respawned, start failures, and stop leaving no process.

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, describe, it } from "node:test";
import { resolveBinary } from "../../src/binary.js";
import { contentText, mapCallResult, mapOutcome } from "../../src/result.js";
import type { SessionPlan } from "../../src/session-key.js";
import { metaFromTool } from "../../src/tool-meta.js";
import { type ExecuteOutcome, Workspace } from "../../src/workspace.js";
import { commandLine, killMarked, markedProcesses, newMark, removeTempDirs, replBinary, replEnv, tempDir } from "../helpers/env.js";
import { waitUntil } from "../helpers/eventually.js";

const marks: string[] = [];

function workspace(
	plan: SessionPlan = {},
	binary = replBinary(),
	extraEnv: Record<string, string> = {},
	maxMessageBytes?: number,
): { ws: Workspace; mark: string; home: string; cwd: string } {
	const mark = newMark();
	marks.push(mark);
	const root = tempDir("ws");
	const home = join(root, "home");
	const cwd = join(root, "project");
	mkdirSync(cwd, { recursive: true });
	const env = { ...replEnv(mark, home), PI_REPL_BIN: binary, ...extraEnv };
	const ws = new Workspace({ resolveBinary: () => resolveBinary({ env, packageDir: root }), plan, cwd, env, maxMessageBytes });
	return { ws, mark, home, cwd };
}

function text(outcome: ExecuteOutcome): string {
	if (outcome.kind === "result") return contentText(mapCallResult(outcome.result).content);
	if (outcome.kind === "stopped" || outcome.kind === "unavailable" || outcome.kind === "protocol-error") return outcome.message;
	if (outcome.kind === "too-large" || outcome.kind === "cancelled") return contentText(mapOutcome(outcome).content);
	return (outcome as { kind: string }).kind;
}

function serverPid(mark: string): number {
	const pid = markedProcesses(mark).find((p) => commandLine(p).includes("mcp"));
	assert.ok(pid, "a pi-repl mcp process is running");
	return pid;
}

describe("workspace over the real pi-repl", () => {
	afterEach(() => {
		for (const mark of marks.splice(0)) killMarked(mark);
	});
	after(removeTempDirs);

	it("registers what tools/list serves and keeps state between calls", async () => {
		const { ws, mark } = workspace();
		try {
			const started = await ws.start();
			assert.ok(started.ok, started.ok ? "" : started.message);
			const meta = metaFromTool(started.tool);
			assert.match(meta.description, /persistent/);
			assert.ok(meta.promptSnippet && !meta.promptSnippet.startsWith("execute:"), meta.promptSnippet);
			assert.ok((meta.promptGuidelines ?? []).length > 0);
			const properties = Object.keys((meta.parameters as { properties: Record<string, unknown> }).properties).sort();
			assert.deepEqual(properties, ["cell", "code", "interrupt", "rewind", "timeout_ms", "wait_ms"], "pi-repl's schema, unchanged");
			assert.equal(text(await ws.execute({ code: "x = 20" })), "(no output)");
			assert.equal(text(await ws.execute({ code: "x + 22" })), "42");
		} finally {
			await ws.stop();
		}
		assert.deepEqual(markedProcesses(mark), [], "stop() leaves no pi-repl or kernel process");
	});

	it("streams output while the cell runs", async () => {
		const { ws } = workspace();
		try {
			await ws.start();
			// The cell waits, after its first line, for a file this side writes only when that
			// line has arrived: the cell can end only if its output streamed while it ran.
			const seen = join(tempDir("stream"), "first-line-seen");
			const chunks: string[] = [];
			const outcome = await ws.execute(
				{
					code: `import os, time\nprint('first', flush=True)\nt = time.time()\nwhile not os.path.exists(${JSON.stringify(seen)}):\n    assert time.time() - t < 120, 'the first line never reached the client'\n    time.sleep(0.01)\nprint('second')`,
				},
				{
					onOutput: (t) => {
						chunks.push(t);
						if (t.includes("first")) writeFileSync(seen, "");
					},
				},
			);
			assert.equal(outcome.kind, "result", JSON.stringify(outcome));
			assert.ok(chunks.some((c) => c.includes("first")), JSON.stringify(chunks));
		} finally {
			await ws.stop();
		}
	});

	it("a cancelled call interrupts the cell and the workspace survives", async () => {
		const { ws } = workspace();
		try {
			await ws.start();
			await ws.execute({ code: "kept = 'still here'" });
			const controller = new AbortController();
			const running = ws.execute(
				{ code: "import time\nprint('before the wait', flush=True)\ntime.sleep(60)" },
				// Cancel once the cell is known to run: its first output has arrived.
				{ signal: controller.signal, onOutput: (t) => t.includes("before the wait") && controller.abort() },
			);
			const cancelled = await running;
			assert.equal(cancelled.kind, "cancelled", "withdrawn, not a result after the 60 s cell");
			assert.match(text(cancelled), /^Cancelled: this call was withdrawn while the cell ran/);
			assert.match(text(cancelled), /Output received before the cancellation:\nbefore the wait$/);
			// pi-repl reads the cancellation as an answer nobody will read: the next result
			// starts by saying how the cell ended (issue 13), then the new cell's output.
			const next = await ws.execute({ code: "print(kept)" });
			assert.match(text(next), /^<cell_finished cell=\d+ status=aborted [^]*\[aborted: the call was cancelled\][^]*<\/cell_finished>\nstill here$/);
		} finally {
			await ws.stop();
		}
	});

	it(
		"a cancellation that lands during pi-repl's background save keeps the kernel",
		async () => {
			const { ws } = workspace({ session: "cancel-during-save" });
			try {
				await ws.start();
				// pi-repl saves `kept` as this answer leaves; the next cell is sent at once and runs
				// beside that save, and is cancelled as soon as it runs (its first line arrived), so
				// the cancel is a real interrupt, not the drop of a queued call.
				await ws.execute({ code: "kept = 'survived'" });
				const controller = new AbortController();
				const running = ws.execute(
					{ code: "import time\nprint('running', flush=True)\ntime.sleep(60)" },
					{ signal: controller.signal, onOutput: (t) => t.includes("running") && controller.abort() },
				);
				assert.equal((await running).kind, "cancelled");
				// The next result says how the interrupted cell ended, then the value: no reset.
				assert.match(
					text(await ws.execute({ code: "print(kept)" })),
					/^<cell_finished [^]*status=aborted [^]*<\/cell_finished>\nsurvived$/,
					"the cell was interrupted and the kernel kept (no <repl_engine_reset>)",
				);
			} finally {
				await ws.stop();
			}
		},
	);

	it(
		"a cell sent while pi-repl saves the previous one runs in the same kernel",
		async () => {
			const { ws } = workspace({ session: "cell-during-save" });
			try {
				await ws.start();
				await ws.execute({ code: "x = 21" });
				const next = text(await ws.execute({ code: "from PIL import Image\nprint(x * 2)" }));
				assert.equal(next, "42", "no <repl_engine_reset>");
			} finally {
				await ws.stop();
			}
		},
	);

	it("a server killed while idle is reported once by the next call, whose code does not run; the call after respawns", async () => {
		const { ws, mark } = workspace();
		try {
			await ws.start();
			await ws.execute({ code: "import os\nos.environ['MARKER_RAN'] = '0'" });
			const first = serverPid(mark);
			process.kill(first, "SIGKILL");
			// The workspace has seen the exit (a call sent before that would be "stopped while
			// running", another case, below).
			await waitUntil(() => ws.pid === undefined, 30_000, "the workspace to see the server die");
			const found = await ws.execute({ code: "open('ran-after-death', 'w').write('x')" });
			assert.equal(found.kind, "stopped");
			assert.match(text(found), /pi-repl stopped since the last call: it was killed by signal SIGKILL\./);
			assert.match(text(found), /The code of this call did not run\./);
			assert.match(text(found), /The next execute call starts it again/);
			const again = await ws.execute({ code: "import os\nprint(os.path.exists('ran-after-death'))" });
			assert.equal(text(again), "False");
			assert.notEqual(serverPid(mark), first, "a new server serves the workspace");
		} finally {
			await ws.stop();
		}
	});

	it("a server that dies during a call ends that call with its exit and stderr tail", async () => {
		const { ws, mark } = workspace({}, replBinary(), { PI_REPL_LOG: "info" });
		try {
			await ws.start();
			let started: () => void = () => {};
			const cellRuns = new Promise<void>((resolve) => {
				started = resolve;
			});
			const running = ws.execute(
				{ code: "import time\nprint('started', flush=True)\ntime.sleep(60)" },
				{ onOutput: (t) => t.includes("started") && started() },
			);
			await cellRuns;
			process.kill(serverPid(mark), "SIGKILL");
			const outcome = await running;
			assert.equal(outcome.kind, "stopped", text(outcome));
			assert.match(text(outcome), /pi-repl stopped while running this cell: it was killed by signal SIGKILL\./);
			assert.match(text(outcome), /Its last output on stderr:\n {2}.*INFO/);
			assert.doesNotMatch(text(outcome), /\x1b/, "no terminal escapes reach the model");
			assert.doesNotMatch(text(outcome), /did not run/);
			assert.equal(text(await ws.execute({ code: "print('back')" })), "back");
		} finally {
			await ws.stop();
		}
	});

	it("arguments reach pi-repl as the model gave them, and pi-repl's own error explains bad ones", async () => {
		const { ws } = workspace();
		try {
			await ws.start();
			const notString = await ws.execute({ code: 42 });
			assert.equal(notString.kind, "protocol-error");
			assert.match(text(notString), /-32602.*`code` must be a string/);
			const unknown = await ws.execute({ code: "print('ran')", verbose: true });
			assert.equal(unknown.kind, "protocol-error");
			assert.match(text(unknown), /unknown argument `verbose`/);
			assert.equal(text(await ws.execute({ code: "import time\ntime.sleep(30)", timeout_ms: 300 })).includes("aborted"), true);
		} finally {
			await ws.stop();
		}
	});

	it("an answer over the message cap fails its call at once with a clear error; the workspace goes on", async () => {
		// The cap is lowered to 16 KiB so a cell's own output (up to 30000 characters a stream after
		// pi-repl's cap) can exceed it; the real cap is 64 MiB.
		const { ws } = workspace({}, replBinary(), {}, 16 * 1024);
		try {
			const started = await ws.start();
			assert.ok(started.ok, started.ok ? "" : started.message);
			const outcome = await ws.execute({ code: "big = '\\n'.join('y' * 99 for _ in range(400))\nprint(big)" });
			assert.equal(outcome.kind, "too-large", text(outcome));
			assert.match(text(outcome), /larger than 16384 bytes, more than the pi extension accepts, so it was dropped and the call withdrawn/);
			assert.equal(mapOutcome(outcome).isError, true);
			assert.equal(text(await ws.execute({ code: "print(len(big))" })), "39999", "the same server and kernel serve the next call");
		} finally {
			await ws.stop();
		}
	});

	it("a missing binary: start fails with how to install, and each call says so without throwing", async () => {
		const { ws, mark } = workspace({}, "/nonexistent/pi-repl");
		const started = await ws.start();
		assert.equal(started.ok, false);
		assert.match(started.ok ? "" : started.message, /PI_REPL_BIN is set to \/nonexistent\/pi-repl/);
		const outcome = await ws.execute({ code: "1" });
		assert.equal(outcome.kind, "unavailable");
		assert.deepEqual(markedProcesses(mark), []);
		await ws.stop();
	});

	it("a server that exits before it is ready: the call reports its exit code and stderr", async () => {
		// /bin/false stands in for a pi-repl that fails at boot (bad interpreter, locked session, ...).
		const { ws } = workspace({}, "/bin/false");
		const started = await ws.start();
		assert.equal(started.ok, false);
		assert.match(started.ok ? "" : started.message, /pi-repl exited with code 1 before it was ready/);
		await ws.stop();
	});

	it("a server that fails at boot: the message has its exit code and its stderr", async () => {
		const root = tempDir("fake");
		const fake = join(root, "pi-repl");
		writeFileSync(fake, "#!/bin/sh\necho 'error: the session is in use by another pi-repl' >&2\nexit 3\n");
		chmodSync(fake, 0o755);
		const { ws } = workspace({}, fake);
		const started = await ws.start();
		assert.equal(started.ok, false);
		const message = started.ok ? "" : started.message;
		assert.match(message, /pi-repl exited with code 3 before it was ready/);
		assert.match(message, /Its last output on stderr:\n {2}error: the session is in use by another pi-repl/);
		assert.match(message, /The next execute call tries to start it again/);
		await ws.stop();
	});

	it("a fork whose parent saved nothing starts empty, and the first result says so", async () => {
		const { ws } = workspace({ session: "child-session", forkFrom: "no-such-parent" });
		try {
			const started = await ws.start();
			assert.ok(started.ok, started.ok ? "" : started.message);
			assert.deepEqual(started.notes, [], "pi-repl starts the fork by itself, no retry needed");
			const first = text(await ws.execute({ code: "print('works')" }));
			assert.match(first, /forked from "no-such-parent", which has no saved workspace/);
			assert.match(first, /works$/);
		} finally {
			await ws.stop();
		}
	});

	it("stop() during the first start ends that start at once instead of waiting for it", async () => {
		// A Python whose kernel never comes up: it blocks on its stdin, which is pi-repl's lifeline
		// pipe, so it ends when pi-repl does (as a real kernel does). pi-repl waits for this kernel
		// before it answers tools/list; stop() must not wait with it.
		const root = tempDir("hang");
		const hanging = join(root, "python");
		writeFileSync(hanging, "#!/bin/sh\nexec cat > /dev/null\n");
		chmodSync(hanging, 0o755);
		const { ws, mark } = workspace({}, replBinary(), { PI_REPL_PYTHON: hanging });
		const starting = ws.start();
		await waitUntil(() => markedProcesses(mark).some((pid) => commandLine(pid)[0] === "cat"), 60_000, "the hanging kernel to start");
		await ws.stop();
		const started = await starting;
		assert.equal(started.ok, false, "the start was ended, not completed");
		assert.equal(started.ok ? "" : started.message, "pi-repl was stopped with the session while it was starting");
		assert.deepEqual(
			markedProcesses(mark).filter((pid) => commandLine(pid).includes("mcp")),
			[],
			"stop() returns once pi-repl is gone",
		);
		await waitUntil(() => markedProcesses(mark).length === 0, 30_000, "the kernel to follow pi-repl");
		assert.equal((await ws.execute({ code: "1" })).kind, "unavailable", "nothing is spawned after stop()");
	});

	it("after stop() nothing is spawned again", async () => {
		const { ws, mark } = workspace();
		await ws.start();
		await ws.stop();
		const outcome = await ws.execute({ code: "1" });
		assert.equal(outcome.kind, "unavailable");
		assert.deepEqual(markedProcesses(mark), []);
	});
});
