// End to end through the real `pi` in RPC mode (the only non-interactive mode where pi forwards
// `ctx.ui.notify` and accepts abort, clone and session switches): kernel death and the human's
// notice, Esc as MCP cancellation, a pi-repl killed from outside, and the session lifecycle
// (fork, resume, shutdown).

import assert from "node:assert/strict";
import { after, afterEach, describe, it } from "node:test";
import { killMarked, markedProcesses, removeTempDirs } from "../helpers/env.js";
import { waitUntil } from "../helpers/eventually.js";
import { type ModelRecord, PiSandbox, RpcPi } from "../helpers/pi.js";

const running: RpcPi[] = [];
function start(box: PiSandbox, flags: string[] = ["--repl"]): RpcPi {
	const pi = new RpcPi(box, flags);
	running.push(pi);
	return pi;
}

afterEach(async () => {
	for (const pi of running.splice(0)) {
		await pi.close(5_000).catch(() => undefined);
		killMarked(pi.mark);
	}
});
after(removeTempDirs);

function toolEnds(events: Record<string, any>[]): any[] {
	return events.filter((e) => e.type === "tool_execution_end");
}

function resultText(end: any): string {
	return (end?.result?.content ?? [])
		.filter((b: { type: string }) => b.type === "text")
		.map((b: { text: string }) => b.text)
		.join("\n");
}

function notifications(pi: RpcPi): { message: string; notifyType: string }[] {
	return pi.events.filter((e) => e.type === "extension_ui_request" && e.method === "notify") as never;
}

function serverOf(record: ModelRecord | undefined): { pid: number; argv: string[] } | undefined {
	return record?.children.find((c) => c.argv.includes("mcp"));
}

function argValue(argv: string[], flag: string): string | undefined {
	const index = argv.indexOf(flag);
	return index === -1 ? undefined : argv[index + 1];
}

function alive(pid: number): boolean {
	try {
		process.kill(pid, 0);
		return true;
	} catch {
		return false;
	}
}

describe("pi --repl in RPC mode", () => {
	it("a kernel killed mid-session: the next call opens with the reset notice and the human is told in one line", async () => {
		const box = new PiSandbox();
		box.script([
			{ call: { code: "before = 1" } },
			// Once pi-repl has saved `before`, so the kernel's death is the only event.
			{ waitSaved: "before", call: { code: "import os\nos._exit(1)" } },
			{ call: { code: "print('after')" } },
			{ say: "done" },
		]);
		const pi = start(box);
		const events = await pi.prompt("go");
		assert.equal(box.records()[1]?.saved, true, "pi-repl saved `before` before the kernel died");
		const ends = toolEnds(events);
		assert.equal(ends.length, 3);
		assert.equal(ends[1].isError, true);
		assert.equal(ends[1].result.details.status, "died");
		const next = ends[2];
		assert.equal(next.isError, false);
		assert.match(resultText(next), /^<repl_engine_reset>\n[\s\S]*<\/repl_engine_reset>\nafter$/);
		const reason = next.result.details.reset?.reason as string;
		assert.ok(reason, "details carry the reset");
		const notices = notifications(pi).filter((n) => n.message.includes("workspace was rebuilt"));
		assert.equal(notices.length, 1, JSON.stringify(notifications(pi)));
		const shown = `pi-repl: the Python workspace was rebuilt (${reason.replace(/\s+/g, " ").slice(0, 40)}`;
		assert.ok(notices[0]?.message.startsWith(shown), `${notices[0]?.message} names "${reason}"`);
		assert.ok(!notices[0]?.message.includes("\n"));
		assert.equal(notices[0]?.notifyType, "warning");
		// What came back is counted from the same reset the model reads.
		const revived = (next.result.details.reset?.revived ?? []) as string[];
		if (revived.length > 0) assert.match(notices[0]?.message ?? "", new RegExp(`; ${revived.length} revived`));
	});

	it("Esc (RPC abort) reaches pi-repl as a cancellation: the cell is interrupted and the workspace survives", async () => {
		const box = new PiSandbox();
		box.script([
			{ call: { code: "kept = 'survived'" } },
			// No pause: the cell (and its cancel) may land while pi-repl saves `kept`.
			{ call: { code: "import time\nprint('sleeping', flush=True)\ntime.sleep(120)" } },
			{ call: { code: "print(kept)" } },
			{ say: "done" },
		]);
		const pi = start(box);
		const first = pi.command({ type: "prompt", message: "go" });
		await first;
		await pi.waitFor(
			(e) => e.type === "tool_execution_update" && e.toolCallId === "call_1" && JSON.stringify(e).includes("sleeping"),
			30_000,
			"the sleeping cell's first output",
		);
		const abortedAt = Date.now();
		await pi.command({ type: "abort" });
		const end = await pi.waitFor((e) => e.type === "tool_execution_end" && e.toolCallId === "call_1", 10_000, "the aborted call to end");
		assert.ok(Date.now() - abortedAt < 5_000, "the abort ends the call at once");
		assert.equal(end.isError, true);
		assert.match(resultText(end), /^Cancelled: this call was withdrawn while the cell ran, and pi-repl was asked to interrupt it\./);
		assert.match(resultText(end), /Output received before the cancellation:\nsleeping$/);
		await pi.waitFor((e) => e.type === "agent_end", 10_000, "the aborted turn to end");
		// If the cell were still sleeping, this call would queue behind it for two minutes.
		const secondAt = Date.now();
		const events = await pi.prompt("again", 20_000);
		const ends = toolEnds(events);
		// The next result first says how the cancelled cell ended (issue 13), then the value,
		// with no reset between: the kernel survived the cancellation.
		assert.match(resultText(ends[0]), /^<cell_finished cell=\d+ status=aborted [^]*<\/cell_finished>\nsurvived$/);
		assert.ok(Date.now() - secondAt < 10_000, "the next call was answered at once");
	});

	it("a pi-repl killed from outside: the next call says it stopped and why, and the one after runs in a new server", async () => {
		const box = new PiSandbox();
		box.script([
			{ call: { code: "a = 1" } },
			// Once pi-repl has saved `a`, its server dies.
			{ waitSaved: "a", killServer: "SIGKILL", call: { code: "open('ran.txt', 'w').write('ran')" } },
			{ call: { code: "import os\nprint('respawned', os.path.exists('ran.txt'))" } },
			{ say: "done" },
		]);
		const pi = start(box);
		const events = await pi.prompt("go");
		const ends = toolEnds(events);
		const records = box.records();
		assert.equal(records[1]?.saved, true, "pi-repl saved `a` before its server was killed");
		assert.equal(records[1]?.killed.length, 1, "the scripted model killed one pi-repl");
		assert.equal(ends[1].isError, true);
		assert.equal(ends[1].result.details.status, "stopped");
		assert.match(resultText(ends[1]), /pi-repl stopped since the last call: it was killed by signal SIGKILL\.\nThe code of this call did not run\./);
		assert.match(resultText(ends[1]), /The next execute call starts it again/);
		assert.equal(ends[2].isError, false, resultText(ends[2]));
		assert.match(resultText(ends[2]), /respawned False$/);
		// The new server revives the session's snapshot and says so, to the model and to the human.
		assert.match(resultText(ends[2]), /^<repl_engine_reset>\n/);
		assert.deepEqual(ends[2].result.details.reset?.revived, ["a"]);
		assert.ok(notifications(pi).some((n) => /^pi-repl: the Python workspace was rebuilt \(.*; 1 revived$/.test(n.message)), JSON.stringify(notifications(pi)));
		const before = serverOf(records[0]);
		const afterRespawn = serverOf(records[3]);
		assert.ok(before && afterRespawn);
		assert.notEqual(afterRespawn.pid, before.pid);
		assert.equal(argValue(afterRespawn.argv, "--session"), argValue(before.argv, "--session"), "same workspace key");
		assert.ok(notifications(pi).some((n) => /^pi-repl: pi-repl stopped since the last call/.test(n.message)), JSON.stringify(notifications(pi)));
	});

	it("fork and resume: a clone spawns with --fork-from the parent and inherits its variables, a switch back serves the parent's key; each old server is stopped first", async () => {
		const box = new PiSandbox();
		box.script([
			{ call: { code: "x = 41" } },
			{ say: "set" },
			{ call: { code: "print('the fork sees', x)" } },
			{ say: "forked" },
			{ call: { code: "print('back')" } },
			{ say: "resumed" },
		]);
		const pi = start(box);
		await pi.prompt("set x");
		const parentFile = (await pi.command({ type: "get_state" })).data.sessionFile as string;
		const parentServer = serverOf(box.records()[0]);
		assert.ok(parentServer);
		const parentKey = argValue(parentServer.argv, "--session");
		assert.ok(parentKey && parentFile.endsWith(`${parentKey}.jsonl`), `${parentKey} from ${parentFile}`);

		const cloned = await pi.command({ type: "clone" });
		assert.equal(cloned.data?.cancelled, false, JSON.stringify(cloned));
		assert.ok(!alive(parentServer.pid), "the parent's server was stopped at session_shutdown");
		const childFile = (await pi.command({ type: "get_state" })).data.sessionFile as string;
		assert.notEqual(childFile, parentFile);
		const forkEnds = toolEnds(await pi.prompt("in the fork"));
		assert.match(resultText(forkEnds[0]), /the fork sees 41$/, "the fork inherited the parent's workspace");
		const childServer = serverOf(box.records()[2]);
		assert.ok(childServer);
		assert.equal(argValue(childServer.argv, "--fork-from"), parentKey);
		assert.ok(childFile.endsWith(`${argValue(childServer.argv, "--session")}.jsonl`));
		assert.equal(argValue(childServer.argv, "--conversation-file"), childFile);

		const switched = await pi.command({ type: "switch_session", sessionPath: parentFile });
		assert.equal(switched.data?.cancelled, false, JSON.stringify(switched));
		assert.ok(!alive(childServer.pid), "the fork's server was stopped at session_shutdown");
		await pi.prompt("back");
		const resumed = serverOf(box.records()[4]);
		assert.ok(resumed);
		assert.equal(argValue(resumed.argv, "--session"), parentKey, "a resumed session is served its own workspace");
		assert.equal(argValue(resumed.argv, "--fork-from"), undefined);
		const all = box.records().flatMap((r) => r.children.filter((c) => c.argv.includes("mcp")).map((c) => c.pid));
		for (const record of box.records()) assert.ok(record.children.filter((c) => c.argv.includes("mcp")).length <= 1, "never two servers at once");
		assert.equal(new Set(all).size, 3);
	});

	it("a resumed session gets its variables back, and the model and the human are told", async () => {
		const box = new PiSandbox();
		box.script([{ call: { code: "revive_me = 41" } }, { say: "set" }]);
		const first = start(box);
		await first.prompt("set");
		const sessionFile = (await first.command({ type: "get_state" })).data.sessionFile as string;
		await first.close();
		box.script([{ call: { code: "print(revive_me + 1)" } }, { say: "done" }]);
		const second = start(box, ["--repl", "--session", sessionFile]);
		const ends = toolEnds(await second.prompt("read"));
		assert.equal(ends[0].isError, false, resultText(ends[0]));
		assert.match(resultText(ends[0]), /^<repl_engine_reset>\n[\s\S]*<\/repl_engine_reset>\n42$/);
		assert.ok((ends[0].result.details.reset?.revived as string[]).includes("revive_me"));
		assert.ok(notifications(second).some((n) => /^pi-repl: the Python workspace was rebuilt \(.*; 1 revived$/.test(n.message)), JSON.stringify(notifications(second)));
	});

	it("quitting pi while a cell runs stops pi-repl, its kernel and the cell's children, promptly", async () => {
		const box = new PiSandbox();
		box.script([{ call: { code: "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\ntime.sleep(300)" } }]);
		const pi = start(box);
		await pi.command({ type: "prompt", message: "go" });
		await pi.waitFor((e) => e.type === "tool_execution_start", 30_000, "the call to start");
		await waitUntil(() => markedProcesses(box.mark).length >= 4, 30_000, "pi, pi-repl, the kernel and sleep to run");
		const closedAt = Date.now();
		// pi.close kills pi only if it has not exited by then: a signal in `exit` means it hung.
		const exit = await pi.close(30_000);
		console.log(`# pi exited ${Date.now() - closedAt} ms after it was closed`);
		assert.equal(exit.signal, null, "pi exited by itself");
		assert.deepEqual(markedProcesses(box.mark), [], "nothing is left");
	});
});
