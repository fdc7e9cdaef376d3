// pi-repl's MCP result → pi's tool result: text, images, errors, details, the reset notice.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { contentText, mapCallResult, mapOutcome, OUTCOME_META, resetNotice } from "../../src/result.js";

const PNG = Buffer.from("89504e470d0a1a0a", "hex").toString("base64");

describe("result mapping", () => {
	it("passes the notebook text through unchanged and keeps the outcome in details", () => {
		const result: CallToolResult = {
			content: [{ type: "text", text: "hello\n42" }],
			isError: false,
			_meta: { [OUTCOME_META]: { status: "ok", cell: 3, duration_ms: 12, result: "42", error: null, truncated: [], full_output: [], images: [] } },
		};
		const mapped = mapCallResult(result);
		assert.equal(mapped.isError, false);
		assert.deepEqual(mapped.content, [{ type: "text", text: "hello\n42" }]);
		assert.deepEqual(mapped.details, { status: "ok", cell: 3, durationMs: 12, fullOutput: [] });
	});

	it("turns MCP images into pi image content, in order, and counts them without copying data into details", () => {
		const mapped = mapCallResult({
			content: [
				{ type: "text", text: "[image 1: 40×30 PNG]" },
				{ type: "image", data: PNG, mimeType: "image/png" },
				{ type: "image", data: PNG, mimeType: "image/jpeg" },
			],
			_meta: { [OUTCOME_META]: { status: "ok", images: [{ path: "/o/1.png" }, { path: "/o/2.jpg" }] } },
		});
		assert.deepEqual(
			mapped.content.map((b) => (b.type === "image" ? `${b.type}:${b.mimeType}:${b.data}` : b.type)),
			["text", `image:image/png:${PNG}`, `image:image/jpeg:${PNG}`],
		);
		assert.equal(mapped.details.images, 2);
		assert.ok(!JSON.stringify(mapped.details).includes(PNG), "no image data in details");
	});

	it("marks a cell that raised as an error with its ename and evalue", () => {
		const mapped = mapCallResult({
			content: [{ type: "text", text: "Traceback...\nZeroDivisionError: division by zero" }],
			isError: true,
			_meta: { [OUTCOME_META]: { status: "error", cell: 1, duration_ms: 30, error: { ename: "ZeroDivisionError", evalue: "division by zero" } } },
		});
		assert.equal(mapped.isError, true);
		assert.equal(mapped.details.status, "error");
		assert.deepEqual(mapped.details.error, { ename: "ZeroDivisionError", evalue: "division by zero" });
	});

	it("keeps died, aborted and the reset as pi-repl reported them", () => {
		const died = mapCallResult({
			content: [{ type: "text", text: "KernelDied: exit 1" }],
			isError: true,
			_meta: { [OUTCOME_META]: { status: "died", error: { ename: "KernelDied", evalue: "exit 1" } } },
		});
		assert.equal(died.details.status, "died");
		const aborted = mapCallResult({
			content: [{ type: "text", text: "[aborted: timeout]" }],
			isError: true,
			_meta: { [OUTCOME_META]: { status: "aborted", abort: { reason: "timeout", kernel_killed: false } } },
		});
		assert.deepEqual(aborted.details.abort, { reason: "timeout", kernel_killed: false });
		const reset = mapCallResult({
			content: [{ type: "text", text: "<repl_engine_reset>\nThe Python workspace was restarted: the kernel died.\n</repl_engine_reset>\nok" }],
			_meta: { [OUTCOME_META]: { status: "ok", reset: { reason: "the kernel died", durable: true, revived: ["a", "b"], lost: [{ name: "c", why: "w" }] } } },
		});
		assert.deepEqual(reset.details.reset, { reason: "the kernel died", durable: true, revived: ["a", "b"], lost: [{ name: "c", why: "w" }] });
		assert.match(contentText(reset.content), /^<repl_engine_reset>/);
	});

	it("reads the outcome from structuredContent when an older pi-repl sends it there", () => {
		const older = mapCallResult({
			content: [{ type: "text", text: "Traceback...\nKeyError: 'k'" }],
			isError: true,
			structuredContent: { status: "error", cell: 4, duration_ms: 9, error: { ename: "KeyError", evalue: "'k'" } },
		});
		assert.deepEqual(older.details, { status: "error", cell: 4, durationMs: 9, error: { ename: "KeyError", evalue: "'k'" } });
	});

	it("prefers _meta over structuredContent when both are present", () => {
		const both = mapCallResult({
			content: [{ type: "text", text: "x" }],
			_meta: { [OUTCOME_META]: { status: "aborted", cell: 2 } },
			structuredContent: { status: "ok", cell: 1 },
		});
		assert.deepEqual([both.details.status, both.details.cell], ["aborted", 2]);
	});

	it("a cell that outlived its call's wait is shown as going on in the background, not as done", () => {
		const running: CallToolResult = {
			content: [{ type: "text", text: "[cell 4 is still running (1 s so far) and goes on in the background]" }],
			isError: false,
			_meta: { [OUTCOME_META]: { status: "running", cell: 4, elapsed_ms: 1000 } },
		};
		assert.equal(mapCallResult(running).details.status, "background");
		const queued: CallToolResult = { ...running, _meta: { [OUTCOME_META]: { status: "queued", cell: 5, blocked_by: 4 } } };
		assert.equal(mapCallResult(queued).details.status, "queued");
	});

	it("labels an image-only result by its image alone, not \"(no output)\"", () => {
		const image = { type: "image" as const, data: "iVBOR", mimeType: "image/png" };
		assert.deepEqual(mapCallResult({ content: [image] }).content, [image]);
	});

	it("tolerates a result without an outcome record: isError decides, and an empty one says (no output)", () => {
		assert.equal(mapCallResult({ content: [], isError: true }).details.status, "error");
		const empty = mapCallResult({ content: [] });
		assert.equal(empty.details.status, "ok");
		assert.deepEqual(empty.content, [{ type: "text", text: "(no output)" }]);
		assert.equal(mapCallResult({ content: [], _meta: { [OUTCOME_META]: { status: "weird" } } }).details.status, "ok");
	});

	it("maps the workspace's own outcomes to errors with their text", () => {
		const cancelled = mapOutcome({ kind: "cancelled", sent: true, output: "step 1\nstep 2\n" });
		assert.deepEqual([cancelled.isError, cancelled.details.status], [true, "cancelled"]);
		const stopped = mapOutcome({ kind: "stopped", message: "pi-repl stopped while running this cell: it was killed by signal SIGKILL." });
		assert.deepEqual([stopped.isError, stopped.details.status], [true, "stopped"]);
		assert.match(contentText(stopped.content), /SIGKILL/);
		const unavailable = mapOutcome({ kind: "unavailable", message: "pi-repl is not installed" });
		assert.deepEqual([unavailable.isError, unavailable.details.status], [true, "unavailable"]);
		const tooLarge = mapOutcome({ kind: "too-large", bytes: 70_000_000, limit: 64 * 1024 * 1024 });
		assert.deepEqual([tooLarge.isError, tooLarge.details.status], [true, "too-large"]);
		assert.match(contentText(tooLarge.content), /larger than 64 MiB, more than the pi extension accepts/);
		assert.match(contentText(tooLarge.content), /How the cell ended is not known/);
		const rejected = mapOutcome({ kind: "protocol-error", message: "code must be a string" });
		assert.match(contentText(rejected.content), /pi-repl rejected the call: code must be a string/);
	});
});

describe("cancellation text", () => {
	it("claims no interruption pi-repl did not confirm, and gives the output that had arrived", () => {
		const text = contentText(mapOutcome({ kind: "cancelled", sent: true, output: "step 1\nstep 2\n" }).content);
		assert.match(text, /^Cancelled: this call was withdrawn while the cell ran, and pi-repl was asked to interrupt it\./);
		assert.match(text, /Whether the cell was interrupted \(KeyboardInterrupt\) or had already finished is not known/);
		assert.doesNotMatch(text, /pi-repl interrupted|variables survive/, "no claim the server did not make");
		assert.match(text, /Output received before the cancellation:\nstep 1\nstep 2$/);
		assert.match(contentText(mapOutcome({ kind: "cancelled", sent: true, output: "" }).content), /No output had arrived\.$/);
	});

	it("a call cancelled before it was sent says the code did not run", () => {
		const text = contentText(mapOutcome({ kind: "cancelled", sent: false, output: "" }).content);
		assert.equal(text, "Cancelled before the call reached pi-repl: the code did not run.");
	});
});

describe("reset notice for the human", () => {
	it("is one line with the reason pi-repl gave the model", () => {
		const line = resetNotice({ reason: "the kernel died (exit code 1)." });
		assert.equal(line, "pi-repl: the Python workspace was rebuilt (the kernel died (exit code 1))");
		assert.ok(!line.includes("\n"));
	});

	it("adds what came back, what is still coming and what was lost, as pi-repl reports them", () => {
		assert.equal(
			resetNotice({ reason: "restarted", durable: true, revived: ["df", "model"], pending: ["big"], lost: [{ name: "conn", why: "a socket" }] }),
			"pi-repl: the Python workspace was rebuilt (restarted); 2 revived; 1 still reviving; 1 lost",
		);
		assert.equal(resetNotice({ reason: "r", restored: 5, failed: [{ name: "x" }] }), "pi-repl: the Python workspace was rebuilt (r); 5 revived; 1 lost");
		assert.equal(resetNotice({ reason: "r", durable: false, revived: [], lost: [] }), "pi-repl: the Python workspace was rebuilt (r)");
	});

	it("stays short for a long multi-line reason", () => {
		const line = resetNotice({ reason: `${"very long reason ".repeat(40)}\nsecond line` });
		assert.ok(!line.includes("\n"));
		assert.ok(line.length <= 120, String(line.length));
	});
});
