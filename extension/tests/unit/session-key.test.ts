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

	it("never passes --fork-from or --conversation-file without --session (pi-repl requires it)", () => {
		assert.deepEqual(serverArgs("/w", { forkFrom: "p", conversationFile: FILE }), ["mcp", "--cwd", "/w", "--wait-ms", "end"]);
	});
});
