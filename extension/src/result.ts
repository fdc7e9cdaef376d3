// What an `execute` call returns to pi: the model's content and the details kept for rendering.
//
// Owns: mapping pi-repl's MCP result (text, images, the `_meta["pi-repl/outcome"]` record) and
// the workspace's own outcomes (stopped, unavailable, cancelled, too large) to pi's tool result,
// and the one-line notice that tells the human the workspace was rebuilt. Does not own: any
// judgement about the cell — the text, the status and the reset come from pi-repl as they are.
//
// Invariants: the model sees pi-repl's text unchanged (its notebook-order text, with the
// `<repl_engine_reset>` block first when there is one) and every image; `isError` is exactly
// pi-repl's `isError`, or true for a stopped, unavailable, cancelled or too-large call; a
// cancellation claims nothing pi-repl did not confirm; details never carry image data (it is in
// the content already).

import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import type { ModelCall } from "./sampling.js";

export interface TextBlock {
	type: "text";
	text: string;
}
export interface ImageBlock {
	type: "image";
	data: string;
	mimeType: string;
}
export type ContentBlock = TextBlock | ImageBlock;

/** The outcome of one call, as the renderer shows it. */
export type ExecuteStatus =
	| "running"
	| "background"
	| "queued"
	| "ok"
	| "error"
	| "aborted"
	| "died"
	| "cancelled"
	| "stopped"
	| "unavailable"
	| "too-large"
	| "unknown";

/** Why the workspace was rebuilt before this call (the `reset` of pi-repl's outcome record). */
export interface ResetInfo {
	reason: string;
	/** Any further fields pi-repl reports (what came back, what was lost), kept as they are. */
	[field: string]: unknown;
}

/** `details` of an execute tool result: small, plain data for the renderer and the session file. */
export interface ExecuteDetails {
	status: ExecuteStatus;
	/** The cell's number in the server's engine. */
	cell?: number;
	/**
	 * The workspace state this call left (its pi-repl session and cell), set by the extension for
	 * a call that ran code in a durable workspace: what `/tree` and `/fork` return to
	 * (workspace-tree.ts).
	 */
	workspaceState?: { workspace: string; cell: number };
	durationMs?: number;
	error?: { ename: string; evalue: string } | null;
	reset?: ResetInfo;
	abort?: { reason?: string; [field: string]: unknown };
	/** Files holding output that was cut. */
	fullOutput?: string[];
	/** How many images the result carries. */
	images?: number;
	/** For a running call: when it started (ms since epoch). */
	startedAt?: number;
	/** For a running call: the model calls (a cell's `llm_query`) pi is answering now. */
	modelCalls?: ModelCall[];
}

/** A pi tool result, plus whether it is an error (pi learns that by a throw). */
export interface MappedResult {
	content: ContentBlock[];
	details: ExecuteDetails;
	isError: boolean;
}

const STATUSES: ReadonlySet<string> = new Set(["ok", "error", "aborted", "died"]);

/**
 * How a result ended for the renderer. pi-repl answers `running` or `queued` when the call's
 * wait (`wait_ms`) ran out first: the cell goes on in the background (collected later with
 * `{"cell": N}`), which is not a running call.
 */
function statusOf(status: unknown, isError: boolean): ExecuteStatus {
	if (status === "running") return "background";
	if (status === "queued") return "queued";
	if (typeof status === "string" && STATUSES.has(status)) return status as ExecuteStatus;
	return isError ? "error" : "ok";
}

/** The `_meta` key under which pi-repl puts a result's machine-readable outcome. */
export const OUTCOME_META = "pi-repl/outcome";

/**
 * The machine-readable outcome of a result (status, cell, duration_ms, error, reset, abort,
 * full_output, ...): `_meta["pi-repl/outcome"]`, or `structuredContent` from a pi-repl that
 * predates the move to `_meta` (clients showed that JSON to the model instead of the text).
 */
export function outcomeRecord(result: CallToolResult): Record<string, unknown> {
	return record(record(result._meta)?.[OUTCOME_META]) ?? record(result.structuredContent) ?? {};
}

function record(value: unknown): Record<string, unknown> | undefined {
	return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

/** Maps a `tools/call execute` result. */
export function mapCallResult(result: CallToolResult): MappedResult {
	const content: ContentBlock[] = [];
	for (const block of result.content ?? []) {
		if (block.type === "text") content.push({ type: "text", text: block.text });
		else if (block.type === "image") content.push({ type: "image", data: block.data, mimeType: block.mimeType });
		else if (block.type === "resource_link") content.push({ type: "text", text: `[${block.name}: ${block.uri}]` });
		// pi-repl sends only text and images; anything else has no pi equivalent.
	}
	// pi-repl sends a silent cell as an empty result, and an image shown at its own size
	// without a caption (issue 22): only a result with nothing at all gets pi's "(no output)".
	if (content.length === 0) content.push({ type: "text", text: "(no output)" });
	const outcome = outcomeRecord(result);
	const isError = result.isError === true;
	const status = statusOf(outcome.status, isError);
	const details: ExecuteDetails = { status };
	if (typeof outcome.cell === "number") details.cell = outcome.cell;
	if (typeof outcome.duration_ms === "number") details.durationMs = outcome.duration_ms;
	const error = record(outcome.error);
	if (error) details.error = { ename: String(error.ename ?? "Error"), evalue: String(error.evalue ?? "") };
	const reset = record(outcome.reset);
	if (reset && typeof reset.reason === "string") details.reset = { ...reset, reason: reset.reason };
	const abort = record(outcome.abort);
	if (abort) details.abort = { ...abort, reason: typeof abort.reason === "string" ? abort.reason : undefined };
	if (Array.isArray(outcome.full_output)) details.fullOutput = outcome.full_output.filter((p): p is string => typeof p === "string");
	const images = content.filter((block) => block.type === "image").length;
	if (images > 0) details.images = images;
	return { content, details, isError };
}

/** A result made of one text, for the outcomes the extension itself reports. */
export function textResult(status: ExecuteStatus, text: string, isError: boolean): MappedResult {
	return { content: [{ type: "text", text }], details: { status }, isError };
}

/**
 * The text a cancelled call returns. It says only what is known: the call was withdrawn and
 * pi-repl asked to interrupt the cell (an MCP cancellation), and the output that had arrived.
 * pi-repl's answer to a cancelled call is not seen, so whether the cell was interrupted or had
 * already finished is not claimed.
 */
export function cancelledText(outcome: { sent: boolean; output: string }): string {
	if (!outcome.sent) return "Cancelled before the call reached pi-repl: the code did not run.";
	const lines = [
		"Cancelled: this call was withdrawn while the cell ran, and pi-repl was asked to interrupt it.",
		"Whether the cell was interrupted (KeyboardInterrupt) or had already finished is not known: check the workspace's state before relying on what this cell did. If pi-repl had to rebuild the workspace, the next result opens with <repl_engine_reset>.",
	];
	const output = outcome.output.trimEnd();
	if (output === "") lines.push("No output had arrived.");
	else lines.push("Output received before the cancellation:", output);
	return lines.join("\n");
}

/**
 * The text for a call whose answer was over the size cap: what is known (pi-repl answered with
 * something too large to accept, the call was withdrawn) and what is not (how the cell ended).
 */
export function tooLargeText(limit: number): string {
	const mib = Math.round(limit / (1024 * 1024));
	return [
		`pi-repl answered this call with a message larger than ${mib >= 1 ? `${mib} MiB` : `${limit} bytes`}, more than the pi extension accepts, so it was dropped and the call withdrawn.`,
		"How the cell ended is not known: it may have run to the end. Check the workspace's state before relying on it, and keep a cell's printed output and images small (write large results to a file).",
	].join("\n");
}

/** All the text of a result's content, in order. */
export function contentText(content: readonly { type: string; text?: string }[] | undefined): string {
	return (content ?? [])
		.filter((block): block is { type: "text"; text: string } => block.type === "text" && typeof block.text === "string")
		.map((block) => block.text)
		.join("\n");
}

/**
 * One short line for the human when the workspace was rebuilt, from the same `reset` the model
 * reads in `<repl_engine_reset>`, with how many names were revived, are still being revived and
 * were lost, when pi-repl reports them (`revived`, `pending`, `lost`: lists or numbers).
 */
export function resetNotice(reset: ResetInfo): string {
	const parts = [`pi-repl: the Python workspace was rebuilt (${oneLine(reset.reason)})`];
	const revived = count(reset.revived ?? reset.restored);
	const pending = count(reset.pending);
	const lost = count(reset.lost ?? reset.failed);
	if (revived) parts.push(`${revived} revived`);
	if (pending) parts.push(`${pending} still reviving`);
	if (lost) parts.push(`${lost} lost`);
	return parts.join("; ");
}

function count(value: unknown): number | undefined {
	if (Array.isArray(value)) return value.length;
	if (typeof value === "number" && Number.isFinite(value)) return value;
	return undefined;
}

/** Characters of pi-repl's reason kept in the human's one-line notice (the model gets all of it). */
const NOTICE_REASON_CHARS = 72;

function oneLine(text: string): string {
	const line = text.replace(/\s+/g, " ").trim().replace(/\.$/, "");
	return line.length > NOTICE_REASON_CHARS ? `${line.slice(0, NOTICE_REASON_CHARS - 1)}…` : line;
}

/** The workspace outcomes this module maps (structurally; see workspace.ts). */
export type WorkspaceOutcome =
	| { kind: "result"; result: CallToolResult }
	| { kind: "cancelled"; sent: boolean; output: string }
	| { kind: "protocol-error"; message: string }
	| { kind: "too-large"; bytes: number; limit: number }
	| { kind: "stopped"; message: string }
	| { kind: "unavailable"; message: string };

/** Maps any outcome of a call to pi's tool result. */
export function mapOutcome(outcome: WorkspaceOutcome): MappedResult {
	switch (outcome.kind) {
		case "result":
			return mapCallResult(outcome.result);
		case "cancelled":
			return textResult("cancelled", cancelledText(outcome), true);
		case "protocol-error":
			return textResult("error", `pi-repl rejected the call: ${outcome.message}`, true);
		case "too-large":
			return textResult("too-large", tooLargeText(outcome.limit), true);
		case "stopped":
			return textResult("stopped", outcome.message, true);
		case "unavailable":
			return textResult("unavailable", outcome.message, true);
	}
}
