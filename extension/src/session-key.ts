// Session keys: which pi-repl workspace a pi session maps to, and the server's command line.
//
// Owns: deriving the `--session` key from pi's session file, choosing `--fork-from` (and
// `--fork-at`) for a forked session, and building the exact argv of `pi-repl mcp`. Does not
// own: where pi-repl keeps a session's state or how it revives it (that is the server's; it
// prefixes the key with the project, so keys only need to be unique per conversation), or
// which state a forked path saw (workspace-tree.ts).
//
// Invariants: a session without a file (`pi --no-session`) gets no key, so its workspace is
// ephemeral and saves nothing; the key is stable for the life of the session file, so a resumed
// conversation gets its own workspace back; `--fork-from` and `--conversation-file` are only
// passed together with `--session` (the server requires it).

import { basename } from "node:path";
import type { SeenState } from "./workspace-tree.js";

/** Characters pi-repl accepts in a session name unchanged. */
const UNSAFE = /[^A-Za-z0-9._-]+/g;

/**
 * The workspace key of a pi session file: its file name without `.jsonl`
 * (`2025-06-01T10-00-00-000Z_<uuid>`), with any character pi-repl would rewrite replaced by `-`.
 * `undefined` when there is no session file.
 */
export function sessionKeyOf(sessionFile: string | undefined): string | undefined {
	if (!sessionFile) return undefined;
	const name = basename(sessionFile).replace(/\.jsonl$/i, "");
	const key = name.replace(UNSAFE, "-").replace(/^[-.]+|[-.]+$/g, "");
	return key === "" ? undefined : key;
}

/** Why pi started this session (`session_start`'s `reason`). */
export type StartReason = "startup" | "reload" | "new" | "resume" | "fork";

/** What the extension knows about the session at `session_start`. */
export interface SessionFacts {
	reason: StartReason;
	/** The session's file, if it is persisted. */
	sessionFile: string | undefined;
	/** `session_start`'s `previousSessionFile` (the parent, for a fork). */
	previousSessionFile: string | undefined;
	/** The session header's `parentSession` (set by `pi --fork FILE`, which starts as "startup"). */
	headerParentSession: string | undefined;
	/**
	 * For a fork: the workspace state the forked path saw (workspace-tree.ts, over the new
	 * session's branch). Absent: the parent's last snapshot, as before states were recorded.
	 */
	forkPoint?: SeenState;
}

/** Which workspace to serve: the `--session`, `--fork-from` and `--conversation-file` values. */
export interface SessionPlan {
	session?: string;
	forkFrom?: string;
	/** With `forkFrom`: start from that workspace's state right after this cell (`--fork-at`). */
	forkAt?: number;
	conversationFile?: string;
}

/**
 * Maps a pi session to its workspace. A fork (`/fork`, `/clone`: reason "fork"; `pi --fork
 * FILE`, which pi starts with reason "startup" and the parent in the header) starts from the
 * state the last cell on the forked path left, in the workspace that cell ran in
 * (`--fork-from W --fork-at N`); from an empty workspace when no cell ran before the fork point;
 * from the parent's last snapshot when the path's cells do not say (an older extension wrote
 * them). Resume, reload and startup serve the session's own key, which pi-repl revives from its
 * snapshot.
 */
export function planSession(facts: SessionFacts): SessionPlan {
	const session = sessionKeyOf(facts.sessionFile);
	if (!session) return {};
	const plan: SessionPlan = { session, conversationFile: facts.sessionFile };
	let parentFile: string | undefined;
	if (facts.reason === "fork") parentFile = facts.previousSessionFile;
	else if (facts.reason === "startup") parentFile = facts.headerParentSession;
	const parent = sessionKeyOf(parentFile);
	if (!parent || parent === session) return plan;
	const point = facts.forkPoint;
	if (point?.kind === "none") return plan; // forked before any cell: the state it saw is empty
	if (point?.kind === "state" && point.state.workspace !== session) {
		// The last cell on the forked path may be the parent's, or (a fork of a fork, cut before
		// the parent's own first cell) the grandparent's: fork from the workspace it ran in.
		plan.forkFrom = point.state.workspace;
		plan.forkAt = point.state.cell;
		return plan;
	}
	plan.forkFrom = parent;
	return plan;
}

/** The argv (after the binary) of `pi-repl mcp` for `plan`, with the kernel working in `cwd`. */
export function serverArgs(cwd: string, plan: SessionPlan): string[] {
	// pi shows a call's progress live and has no call timeout: a call waits for its cell to end
	// (the model can still ask for a handle with `wait_ms`).
	const args = ["mcp", "--cwd", cwd, "--wait-ms", "end"];
	if (plan.session) {
		args.push("--session", plan.session);
		if (plan.forkFrom) args.push("--fork-from", plan.forkFrom);
		if (plan.forkFrom && plan.forkAt !== undefined) args.push("--fork-at", String(plan.forkAt));
		if (plan.conversationFile) args.push("--conversation-file", plan.conversationFile);
	}
	return args;
}
