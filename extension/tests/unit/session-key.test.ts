// Which workspace a pi session maps to, and the exact argv of `pi-repl mcp`.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { planSession, serverArgs, sessionKeyOf } from "../../src/session-key.js";

const FILE = "/home/u/.pi/agent/sessions/--work-app--/2026-11-30T06-12-40-514Z_01a22b15-85bc-7420-ad05-d088a219cb34.jsonl";
const KEY = "2026-11-30T06-12-40-514Z_01a22b15-85bc-7420-ad05-d088a219cb34";
const PARENT = "/home/u/.pi/agent/sessions/--work-app--/2026-11-29T01-00-00-000Z_parent-id.jsonl";

describe("session key", () => {
	it("is the session file's name without .jsonl", () => {
		assert.equal(sessionKeyOf(FILE), KEY);
	});

	it("is undefined without a session file (an ephemeral workspace)", () => {
		assert.equal(sessionKeyOf(undefined), undefined);
		assert.equal(sessionKeyOf(""), undefined);
	});

	it("replaces characters pi-repl would rewrite, and never yields an empty or dotted key", () => {
		assert.equal(sessionKeyOf("/x/my session:1 (copy).jsonl"), "my-session-1-copy");
		assert.equal(sessionKeyOf("/x/...jsonl"), undefined);
		assert.equal(sessionKeyOf("/x/.hidden.jsonl"), "hidden");
	});
});

describe("session plan", () => {
	const base = { sessionFile: FILE, previousSessionFile: undefined, headerParentSession: undefined };

	it("serves the session's own key on startup and resume, with its conversation file", () => {
		for (const reason of ["startup", "resume", "reload", "new"] as const) {
			assert.deepEqual(planSession({ ...base, reason, previousSessionFile: PARENT }), { session: KEY, conversationFile: FILE }, reason);
		}
	});

	it("forks from the previous session on reason fork", () => {
		assert.deepEqual(planSession({ ...base, reason: "fork", previousSessionFile: PARENT }), {
			session: KEY,
			conversationFile: FILE,
			forkFrom: "2026-11-29T01-00-00-000Z_parent-id",
		});
	});

	it("forks from the header's parent for `pi --fork FILE` (reason startup)", () => {
		assert.equal(planSession({ ...base, reason: "startup", headerParentSession: PARENT }).forkFrom, "2026-11-29T01-00-00-000Z_parent-id");
		// A handoff (/new with a parent) is a new conversation, not a fork of the workspace.
		assert.equal(planSession({ ...base, reason: "new", headerParentSession: PARENT }).forkFrom, undefined);
	});

	it("is empty (ephemeral, no fork) without a session file", () => {
		assert.deepEqual(planSession({ ...base, sessionFile: undefined, reason: "fork", previousSessionFile: PARENT }), {});
	});

	it("never forks a session from itself", () => {
		assert.equal(planSession({ ...base, reason: "fork", previousSessionFile: FILE }).forkFrom, undefined);
	});

	// Issue 25: `/fork` to an earlier message starts from the state that message saw.
	it("forks at the state the forked path saw, from the workspace its last cell ran in", () => {
		const parentKey = "2026-11-29T01-00-00-000Z_parent-id";
		const fork = { ...base, reason: "fork" as const, previousSessionFile: PARENT };
		assert.deepEqual(planSession({ ...fork, forkPoint: { kind: "state", state: { workspace: parentKey, cell: 3 } } }), {
			session: KEY,
			conversationFile: FILE,
			forkFrom: parentKey,
			forkAt: 3,
		});
		// A fork of a fork cut before the parent's own first cell: the grandparent's state.
		const grand = planSession({ ...fork, forkPoint: { kind: "state", state: { workspace: "grandparent", cell: 5 } } });
		assert.deepEqual([grand.forkFrom, grand.forkAt], ["grandparent", 5]);
		// Before any cell: the state that message saw is empty.
		assert.deepEqual(planSession({ ...fork, forkPoint: { kind: "none" } }), { session: KEY, conversationFile: FILE });
		// Cells an older extension recorded without their state: the parent's last snapshot.
		assert.deepEqual(planSession({ ...fork, forkPoint: { kind: "unrecorded" } }).forkFrom, parentKey);
		assert.equal(planSession({ ...fork, forkPoint: { kind: "unrecorded" } }).forkAt, undefined);
		// `pi --fork FILE` (reason startup) follows the same rule; a resume never forks.
		const startup = { ...base, reason: "startup" as const, headerParentSession: PARENT };
		assert.equal(planSession({ ...startup, forkPoint: { kind: "state", state: { workspace: parentKey, cell: 2 } } }).forkAt, 2);
		assert.equal(planSession({ ...base, reason: "resume", forkPoint: { kind: "state", state: { workspace: parentKey, cell: 2 } } }).forkFrom, undefined);
	});
});

describe("server argv", () => {
	it("is `mcp --cwd DIR --wait-ms end` for an ephemeral workspace (pi waits for every cell)", () => {
		assert.deepEqual(serverArgs("/work/app", {}), ["mcp", "--cwd", "/work/app", "--wait-ms", "end"]);
	});

	it("adds --session, --fork-from and --conversation-file in that order", () => {
		assert.deepEqual(serverArgs("/work/app", { session: KEY, forkFrom: "p", conversationFile: FILE }), [
			"mcp",
			"--cwd",
			"/work/app",
			"--wait-ms",
			"end",
			"--session",
			KEY,
			"--fork-from",
			"p",
			"--conversation-file",
			FILE,
		]);
	});

	it("adds --fork-at after --fork-from, and never without it", () => {
		const args = serverArgs("/w", { session: KEY, forkFrom: "p", forkAt: 3 });
		assert.deepEqual(args.slice(5), ["--session", KEY, "--fork-from", "p", "--fork-at", "3"]);
		assert.ok(!serverArgs("/w", { session: KEY, forkAt: 3 }).includes("--fork-at"));
	});

	it("never passes --fork-from or --conversation-file without --session (pi-repl requires it)", () => {
		assert.deepEqual(serverArgs("/w", { forkFrom: "p", conversationFile: FILE }), ["mcp", "--cwd", "/w", "--wait-ms", "end"]);
	});
});
