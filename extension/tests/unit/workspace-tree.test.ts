// Which workspace state a point of pi's conversation tree saw (the entry walk), and what a
// navigation does about it (issue 25).

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
	decide,
	type EntryLike,
	heldAfter,
	latestRecorded,
	REWIND_ENTRY,
	sameState,
	stateLeftBy,
	stateSeenBy,
} from "../../src/workspace-tree.js";

const W = "2026-12-02T08-00-00-000Z_parent";

function user(text: string): EntryLike {
	return { type: "message", message: { role: "user", content: text } } as EntryLike;
}
function assistant(): EntryLike {
	return { type: "message", message: { role: "assistant" } };
}
function result(details: Record<string, unknown> | undefined, toolName = "execute"): EntryLike {
	return { type: "message", message: { role: "toolResult", toolName, details } };
}
function ran(cell: number, workspace = W): EntryLike {
	return result({ status: "ok", cell, workspaceState: { workspace, cell } });
}
function rewound(cell: number, same: number, workspace = W): EntryLike {
	return { type: "custom", customType: REWIND_ENTRY, data: { workspace, cell, same } };
}

describe("the state a path saw", () => {
	it("is the state the last answered cell on the path left", () => {
		const path = [user("one"), assistant(), ran(1), assistant(), user("two"), assistant(), ran(2), assistant()];
		assert.deepEqual(stateSeenBy(path), { kind: "state", state: { workspace: W, cell: 2 } });
		assert.deepEqual(stateSeenBy(path.slice(0, 4)), { kind: "state", state: { workspace: W, cell: 1 } });
	});

	it("is a rewind this extension recorded when it comes after the path's cells", () => {
		const path = [user("one"), ran(1), assistant(), rewound(3, 1), user("three")];
		assert.deepEqual(stateSeenBy(path), { kind: "state", state: { workspace: W, cell: 3, same: 1 } });
		assert.deepEqual(stateSeenBy([...path, ran(4)]), { kind: "state", state: { workspace: W, cell: 4 } });
	});

	it("skips results that name no state: a look at a cell, another tool, a custom entry of another extension", () => {
		const path = [
			ran(1),
			result({ status: "ok", cell: 1 }), // a look at cell 1 after cell 2 ran elsewhere
			result({ status: "ok" }, "read"),
			{ type: "custom", customType: "someone-else", data: { workspace: W, cell: 9 } },
			result({ status: "died", cell: 2 }),
		];
		assert.deepEqual(stateSeenBy(path), { kind: "state", state: { workspace: W, cell: 1 } });
	});

	it("is none before any cell, and unrecorded when the path's cells carry no state (an older extension)", () => {
		assert.deepEqual(stateSeenBy([]), { kind: "none" });
		assert.deepEqual(stateSeenBy([user("hi"), assistant(), result({ status: "cancelled" })]), { kind: "none" });
		assert.deepEqual(stateSeenBy([user("hi"), result({ status: "ok", cell: 3 })]), { kind: "unrecorded" });
	});

	it("ignores malformed states", () => {
		const bad = [result({ status: "ok", cell: 1, workspaceState: { workspace: W, cell: 0 } }), rewound(1.5, 1), result(undefined)];
		assert.deepEqual(stateSeenBy(bad), { kind: "unrecorded" });
	});

	it("keeps the parent's cells apart from a fork's own: each names its workspace", () => {
		const path = [ran(7, "parent"), assistant(), ran(1, "child")];
		assert.deepEqual(stateSeenBy(path.slice(0, 2)), { kind: "state", state: { workspace: "parent", cell: 7 } });
		assert.deepEqual(stateSeenBy(path), { kind: "state", state: { workspace: "child", cell: 1 } });
	});
});

describe("the latest recorded state", () => {
	it("is the highest cell of this workspace on any branch, a rewind included", () => {
		const entries = [ran(1), ran(2), rewound(3, 1), ran(4, "other"), ran(9, "parent")];
		assert.deepEqual(latestRecorded(entries, W), { workspace: W, cell: 3, same: 1 });
		assert.equal(latestRecorded([user("x")], W), undefined);
	});
});

describe("the state a call left", () => {
	it("names the workspace and cell of a call that ran code, and nothing for a look, a death or an ephemeral workspace", () => {
		assert.deepEqual(stateLeftBy(W, { code: "x = 1" }, { status: "ok", cell: 4 }), { workspace: W, cell: 4 });
		assert.deepEqual(stateLeftBy(W, { code: "1/0" }, { status: "error", cell: 5 }), { workspace: W, cell: 5 });
		assert.deepEqual(stateLeftBy(W, { rewind: 1 }, { status: "ok", cell: 6 }), { workspace: W, cell: 6 });
		assert.equal(stateLeftBy(W, { cell: 4 }, { status: "ok", cell: 4 }), undefined);
		assert.equal(stateLeftBy(W, { code: "os._exit(1)" }, { status: "died", cell: 7 }), undefined);
		assert.equal(stateLeftBy(W, { code: "x", wait_ms: 0 }, { status: "background", cell: 8 }), undefined);
		assert.equal(stateLeftBy(W, { code: "x" }, { status: "cancelled" }), undefined);
		assert.equal(stateLeftBy(undefined, { code: "x" }, { status: "ok", cell: 1 }), undefined);
	});

	it("moves what the workspace holds, or makes it unknown when the call's effect is not known", () => {
		const at2 = { workspace: W, cell: 2 };
		assert.deepEqual(heldAfter(at2, { workspace: W, cell: 3 }, { code: "x" }, { status: "ok", cell: 3 }), { workspace: W, cell: 3 });
		assert.deepEqual(heldAfter(at2, undefined, { cell: 1 }, { status: "ok", cell: 1 }), at2);
		assert.deepEqual(heldAfter(at2, undefined, { code: "x" }, { status: "unavailable" }), at2);
		assert.deepEqual(heldAfter(at2, undefined, { code: 1 }, { status: "error" }), at2);
		assert.equal(heldAfter(at2, undefined, { code: "x" }, { status: "cancelled" }), "unknown");
		assert.equal(heldAfter(at2, undefined, { code: "x" }, { status: "died", cell: 3 }), "unknown");
		assert.equal(heldAfter(undefined, undefined, { code: "x" }, { status: "ok", cell: 1 }), "unknown");
	});
});

describe("a navigation", () => {
	const at = (cell: number, workspace = W, same?: number) => ({ workspace, cell, ...(same === undefined ? {} : { same }) });

	it("rewinds to the state the new branch saw when the workspace holds another", () => {
		assert.deepEqual(decide({ kind: "state", state: at(1) }, at(2), W), { kind: "rewind", to: at(1) });
		assert.deepEqual(decide({ kind: "state", state: at(2) }, "unknown", W), { kind: "rewind", to: at(2) });
		assert.deepEqual(decide({ kind: "state", state: at(2) }, undefined, W), { kind: "rewind", to: at(2) });
	});

	it("does nothing when the workspace already holds it, a rewind's state being its target's", () => {
		assert.deepEqual(decide({ kind: "state", state: at(2) }, at(2), W), { kind: "nothing" });
		assert.deepEqual(decide({ kind: "state", state: at(1) }, at(3, W, 1), W), { kind: "nothing" });
		assert.deepEqual(decide({ kind: "state", state: at(3, W, 1) }, at(1), W), { kind: "nothing" });
		assert.deepEqual(decide({ kind: "state", state: at(7, "parent") }, at(7, "parent"), W), { kind: "nothing" });
		assert.ok(!sameState(at(1), at(1, "parent")));
	});

	it("says why the workspace keeps its state, and is silent only when nothing ran", () => {
		const told = (action: ReturnType<typeof decide>) => (action.kind === "tell" ? action.message : "");
		assert.match(told(decide({ kind: "none" }, at(2), W)), /keeps its state: no cell had run before the chosen message/);
		assert.deepEqual(decide({ kind: "none" }, undefined, W), { kind: "nothing" });
		assert.match(told(decide({ kind: "state", state: at(1) }, "unknown", undefined)), /not rewound .*ephemeral \(pi --no-session\)/);
		assert.deepEqual(decide({ kind: "state", state: at(1) }, undefined, undefined), { kind: "nothing" });
		assert.match(told(decide({ kind: "state", state: at(4, "parent") }, at(1), W)), /forked from \(parent, after its cell 4\)/);
		assert.match(told(decide({ kind: "unrecorded" }, at(1), W)), /older pi-repl extension/);
	});
});
