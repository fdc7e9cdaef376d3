// Which workspace state a point of pi's conversation tree saw, and what bringing the workspace
// there takes (issue 25: `/tree` and `/fork` to an earlier message rewind the workspace).
//
// Owns: the walk over a path of session entries (root → leaf) that finds the state the last
// answered cell on it left — an `execute` result's `details.workspaceState`, or a rewind this
// extension made (a `pi-repl-rewind` custom entry) — and the decision for a navigation: nothing
// to do, rewind to cell N, or tell the human why the workspace keeps its state. Does not own:
// sending the rewind (index.ts, through the session's Workspace) or what a rewind restores
// (pi-repl's `execute {"rewind": N}`, docs/rewind.md).
//
// Invariants: only results that ran code name a state (a look at an earlier cell,
// `{"cell": N}`, a cancelled or stopped call, a cell the kernel died in, and one left running in
// the background do not); a state belongs to one pi-repl session (`workspace`, the `--session`
// name) because cell numbers are per session, and a fork's path holds its parent's cells too;
// every decision other than "nothing to do" is either a rewind or a message for the human —
// never silence when the workspace does not hold the state the chosen message saw.

/** The customType of the session entry recording a rewind this extension made. */
export const REWIND_ENTRY = "pi-repl-rewind";

/** A state of a pi-repl workspace: right after its answered cell `cell`. */
export interface WorkspaceState {
	/** The pi-repl session (`--session` name) the cell ran in. */
	workspace: string;
	cell: number;
	/** An earlier cell of the same workspace whose state this one equals (a rewind's target). */
	same?: number;
}

/**
 * What the walk found on a path: the state the last answered cell left; no cell at all; or
 * cells recorded by an older extension, which did not note their state (`unrecorded`).
 */
export type SeenState = { kind: "state"; state: WorkspaceState } | { kind: "none" } | { kind: "unrecorded" };

/** The parts of a pi session entry the walk reads (pi's `SessionEntry`, structurally). */
export interface EntryLike {
	type: string;
	customType?: string;
	data?: unknown;
	message?: { role?: string; toolName?: string; details?: unknown };
}

/** The state an `execute` result left, for its `details.workspaceState`; `undefined` if none. */
export function stateLeftBy(
	workspace: string | undefined,
	args: Record<string, unknown>,
	details: { status: string; cell?: number },
): WorkspaceState | undefined {
	if (workspace === undefined || details.cell === undefined) return undefined;
	// A look at (or interrupt of) an earlier cell changes no state.
	if ("cell" in args) return undefined;
	// A cell the kernel died in left no state (the workspace was revived from an older one); a
	// cell still running in the background has not left one yet.
	if (!["ok", "error", "aborted"].includes(details.status)) return undefined;
	return { workspace, cell: details.cell };
}

/**
 * The state the workspace holds after an `execute` call ended with `details`: the state the
 * call left; unchanged by a look at an earlier cell or a call that never ran (pi-repl
 * unavailable, arguments refused); `unknown` after one whose effect is not known.
 */
export function heldAfter(
	current: HeldState,
	left: WorkspaceState | undefined,
	args: Record<string, unknown>,
	details: { status: string; cell?: number },
): HeldState {
	if (left) return left;
	if ("cell" in args || details.status === "unavailable") return current;
	if (details.status === "error" && details.cell === undefined) return current; // refused by pi-repl
	return "unknown";
}

/** The state the last answered cell on `path` (root first) left, or `none`. */
export function stateSeenBy(path: readonly EntryLike[]): SeenState {
	for (let index = path.length - 1; index >= 0; index--) {
		const state = stateOf(path[index] as EntryLike);
		if (state) return { kind: "state", state };
	}
	return path.some((entry) => executeResult(entry)?.cell !== undefined) ? { kind: "unrecorded" } : { kind: "none" };
}

/**
 * The state the workspace `workspace` was last left in, as the session's record has it: the
 * highest cell among every entry (on any branch) that names a state of that workspace.
 */
export function latestRecorded(entries: readonly EntryLike[], workspace: string): WorkspaceState | undefined {
	let latest: WorkspaceState | undefined;
	for (const entry of entries) {
		const state = stateOf(entry);
		if (state?.workspace === workspace && (!latest || state.cell > latest.cell)) latest = state;
	}
	return latest;
}

function stateOf(entry: EntryLike): WorkspaceState | undefined {
	if (entry.type === "custom" && entry.customType === REWIND_ENTRY) return asState(entry.data);
	return asState(executeResult(entry)?.workspaceState);
}

/** The details of an `execute` result entry. */
function executeResult(entry: EntryLike): { cell?: unknown; workspaceState?: unknown } | undefined {
	const message = entry.message;
	if (entry.type !== "message" || message?.role !== "toolResult" || message.toolName !== "execute") return undefined;
	const details = message.details;
	return typeof details === "object" && details !== null ? (details as { cell?: unknown; workspaceState?: unknown }) : {};
}

function asState(value: unknown): WorkspaceState | undefined {
	const given = value as Partial<WorkspaceState> | undefined;
	if (typeof given?.workspace !== "string" || !isCell(given.cell)) return undefined;
	const state: WorkspaceState = { workspace: given.workspace, cell: given.cell };
	if (isCell(given.same)) state.same = given.same;
	return state;
}

function isCell(value: unknown): value is number {
	return typeof value === "number" && Number.isInteger(value) && value > 0;
}

/** Whether two states are the same (a rewind's state equals its target's). */
export function sameState(a: WorkspaceState, b: WorkspaceState): boolean {
	if (a.workspace !== b.workspace) return false;
	const names = (state: WorkspaceState) => [state.cell, ...(state.same === undefined ? [] : [state.same])];
	return names(a).some((cell) => names(b).includes(cell));
}

/** What to do after a navigation. */
export type TreeAction =
	| { kind: "nothing" }
	| { kind: "rewind"; to: WorkspaceState }
	| { kind: "tell"; message: string };

/**
 * The state the workspace holds, as far as the extension knows: a state; `unknown` after a cell
 * that left none it can name (the kernel died, a call was cancelled); `undefined` when no cell
 * has run in it.
 */
export type HeldState = WorkspaceState | "unknown" | undefined;

/**
 * What brings the workspace to the state `seen` (the chosen point's), given the state it holds
 * (`current`) and its pi-repl session (`workspace`, `undefined` for an ephemeral one).
 */
export function decide(seen: SeenState, current: HeldState, workspace: string | undefined): TreeAction {
	if (workspace === undefined) {
		if (!current) return { kind: "nothing" };
		return {
			kind: "tell",
			message:
				"the workspace was not rewound to the chosen message: it is ephemeral (pi --no-session) and keeps no states to return to, so it keeps the variables of its last cell.",
		};
	}
	if (seen.kind === "none") {
		if (!current) return { kind: "nothing" };
		return {
			kind: "tell",
			message:
				"the workspace keeps its state: no cell had run before the chosen message, and pi-repl has no state from before a conversation's first cell to return to.",
		};
	}
	if (seen.kind === "unrecorded") {
		return {
			kind: "tell",
			message:
				"the workspace keeps its state: the cells before the chosen message were recorded by an older pi-repl extension, which did not note the state each one left.",
		};
	}
	const target = seen.state;
	if (current && current !== "unknown" && sameState(current, target)) return { kind: "nothing" };
	if (target.workspace !== workspace) {
		return {
			kind: "tell",
			message: `the workspace keeps its state: the chosen message saw a state of the workspace this conversation was forked from (${target.workspace}, after its cell ${target.cell}), and a workspace rewinds only to states of its own cells.`,
		};
	}
	return { kind: "rewind", to: target };
}
