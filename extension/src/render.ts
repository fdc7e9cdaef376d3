// How an `execute` call looks in pi's terminal UI.
//
// Owns: the compact view (one header line — status, duration, first line of code — and a short
// tail of output) and the expanded view (all the code, all the output), laid out for a given
// width. Pure functions of (view, width, theme) → lines, so they are tested without a terminal.
// Does not own: images (pi draws the result's image content itself) or the row's frame and
// background (pi's default tool shell).
//
// Invariants: no line is wider than the width it was drawn for, at any width; the compact view
// uses a bounded number of terminal rows whatever the output (a 4096-character line is its last
// rows, not forty wrapped ones); cell output is shown as plain text (escape sequences,
// carriage-return redraws and control characters from the kernel are neutralised, tabs
// expanded), so a cell cannot corrupt the screen; drawing is linear in the size of the code and
// output (text-wrap.ts), and a component draws once per width.

import type { Component } from "@mariozechner/pi-tui";
import { truncateToWidth, visibleWidth } from "@mariozechner/pi-tui";
import type { ExecuteStatus, ResetInfo } from "./result.js";
import type { ModelCall } from "./sampling.js";
import { clipToWidth, expandTabs, wrapLine } from "./text-wrap.js";

/** The theme functions used (pi's `Theme` provides them). */
export interface RenderTheme {
	fg(color: ThemeColorName, text: string): string;
	bold(text: string): string;
}
export type ThemeColorName = "toolTitle" | "success" | "error" | "warning" | "muted" | "dim" | "toolOutput" | "accent";

/** Everything the views show about one call. */
export interface CallView {
	code: string;
	status: ExecuteStatus;
	durationMs?: number;
	/** The result's text (streamed so far, or final). */
	output: string;
	reset?: ResetInfo;
	expanded: boolean;
	/** Model calls (a cell's `llm_query`) in flight, while the cell runs. */
	modelCalls?: ModelCall[];
}

/** Terminal rows of output shown under the header when collapsed (plus one for the hint). */
export const COLLAPSED_TAIL_ROWS = 4;
/** Terminal rows of output shown while a cell is running. */
export const RUNNING_TAIL_ROWS = 6;
/** Model calls shown one per line under a running call; more are counted on one more line. */
export const MODEL_CALL_LINES = 3;
/** Characters of a model call's prompt shown. */
export const MODEL_CALL_PROMPT_CHARS = 60;
const TAB_STOP = 4;
const RESET_BLOCK = /<repl_engine_reset>[\s\S]*?<\/repl_engine_reset>\n?/g;

const ICONS: Record<ExecuteStatus, { icon: string; color: ThemeColorName; word?: string }> = {
	running: { icon: "●", color: "warning", word: "running" },
	background: { icon: "◌", color: "warning", word: "still running in the background" },
	queued: { icon: "◌", color: "warning", word: "queued" },
	ok: { icon: "✓", color: "success" },
	error: { icon: "✗", color: "error" },
	aborted: { icon: "⊘", color: "warning", word: "aborted" },
	cancelled: { icon: "⊘", color: "warning", word: "cancelled" },
	died: { icon: "✗", color: "error", word: "kernel died" },
	stopped: { icon: "!", color: "error", word: "pi-repl stopped" },
	unavailable: { icon: "!", color: "error", word: "pi-repl unavailable" },
	"too-large": { icon: "✗", color: "error", word: "answer too large" },
	unknown: { icon: "?", color: "muted" },
};

/**
 * Makes cell output safe to draw: drops escape sequences, keeps what a terminal would show after
 * a carriage return (progress bars), drops other control characters, expands tabs.
 */
export function sanitize(text: string): string {
	const withoutEscapes = text
		.replace(/\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)/g, "") // OSC ... BEL/ST
		.replace(/\x1b\[[0-?]*[ -/]*[@-~]/g, "") // CSI
		.replace(/\x1b[@-_]/g, ""); // other two-byte escapes
	return withoutEscapes
		.replace(/\r\n/g, "\n")
		.split("\n")
		.map((line) => {
			const afterReturn = line.slice(line.lastIndexOf("\r") + 1);
			// biome-ignore lint/suspicious/noControlCharactersInRegex: removing them is the point
			const visible = afterReturn.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, "");
			return expandTabs(visible, TAB_STOP);
		})
		.join("\n");
}

/** "340ms", "1.2s", "2m05s". */
export function formatDuration(ms: number | undefined): string {
	if (ms === undefined || !Number.isFinite(ms) || ms < 0) return "";
	if (ms < 1_000) return `${Math.round(ms)}ms`;
	if (ms < 60_000) return `${(ms / 1_000).toFixed(1)}s`;
	const minutes = Math.floor(ms / 60_000);
	const seconds = Math.floor((ms % 60_000) / 1_000);
	return `${minutes}m${String(seconds).padStart(2, "0")}s`;
}

/** The first line of code worth showing, and how many lines the code has. */
export function codeSummary(code: string): { first: string; lines: number } {
	const lines = sanitize(code.trimEnd()).split("\n");
	const first = lines.find((line) => line.trim() !== "") ?? "";
	return { first: first.trim(), lines: code.trim() === "" ? 0 : lines.length };
}

/** The header: `✓ execute 1.2s  first line of code (+3 lines)`, cut to `width`. */
export function headerLine(view: CallView, width: number, theme: RenderTheme): string {
	const style = ICONS[view.status];
	const { first, lines } = codeSummary(view.code);
	let line = `${theme.fg(style.color, style.icon)} ${theme.fg("toolTitle", theme.bold("execute"))}`;
	if (style.word) line += ` ${theme.fg(style.color, style.word)}`;
	const duration = formatDuration(view.durationMs);
	if (duration) line += ` ${theme.fg("dim", duration)}`;
	// Cut the code's line before styling the header: the header is then short whatever the code.
	if (first) line += `  ${clipToWidth(first, width)}`;
	if (lines > 1) line += theme.fg("dim", ` (+${lines - 1} line${lines === 2 ? "" : "s"})`);
	return truncateToWidth(line, Math.max(1, width), "…");
}

/** The lines under the header: the last rows when collapsed, everything when expanded. */
export function bodyLines(view: CallView, width: number, theme: RenderTheme, expandHint: string): string[] {
	const w = Math.max(1, width);
	const lines: string[] = [];
	const output = sanitize(view.output).trimEnd();
	const calls = view.status === "running" ? modelCallLines(view.modelCalls ?? [], w, theme) : [];
	if (view.expanded) {
		lines.push(...codeBlock(view.code, w, theme));
		lines.push(...calls);
		if (output !== "") {
			lines.push("");
			for (const line of output.split("\n")) for (const row of wrapLine(line, w)) lines.push(theme.fg("toolOutput", row));
		}
		return lines;
	}
	if (view.reset) {
		const reason = clipToWidth(view.reset.reason.replace(/\s+/g, " "), w);
		lines.push(truncateToWidth(theme.fg("warning", `↻ workspace restarted: ${reason}`), w, "…"));
	}
	lines.push(...calls);
	const shown = view.reset ? output.replace(RESET_BLOCK, "").trimStart() : output;
	if (shown === "") return lines;
	const running = view.status === "running";
	// The model calls take their rows from the output's: a running call stays as tall as before.
	const keep = running ? Math.max(2, RUNNING_TAIL_ROWS - calls.length) : COLLAPSED_TAIL_ROWS;
	const tail = tailRows(shown.split("\n"), keep, w);
	if ((tail.hiddenLines > 0 || tail.cutLine) && !running) {
		const s = tail.hiddenLines === 1 ? "" : "s";
		let hidden = `… ${tail.hiddenLines} earlier line${s}`;
		if (tail.cutLine) hidden = tail.hiddenLines > 0 ? `${hidden} and the start of this one` : "… the start of this line";
		lines.push(truncateToWidth(theme.fg("dim", `${hidden}${expandHint ? `, ${expandHint}` : ""}`), w, "…"));
	}
	for (const row of tail.rows) lines.push(theme.fg("toolOutput", row));
	return lines;
}

/** `↳ llm_query: <start of the prompt>… (model)` per call in flight, at most `MODEL_CALL_LINES` and a count. */
export function modelCallLines(calls: readonly ModelCall[], width: number, theme: RenderTheme): string[] {
	const lines = calls.slice(0, MODEL_CALL_LINES).map((call) => {
		// Only the start is shown: a prompt of megabytes is not drawn (nor scanned) whole.
		const prompt = sanitize(call.prompt.slice(0, MODEL_CALL_PROMPT_CHARS * 8)).replace(/\s+/g, " ").trim();
		const cut = [...prompt].length > MODEL_CALL_PROMPT_CHARS || call.prompt.length > MODEL_CALL_PROMPT_CHARS * 8;
		const start = cut ? `${[...prompt].slice(0, MODEL_CALL_PROMPT_CHARS).join("")}…` : prompt;
		const model = sanitize(call.model).replace(/\s+/g, " ");
		return truncateToWidth(`${theme.fg("accent", "↳ llm_query:")} ${start} ${theme.fg("dim", `(${model})`)}`, width, "…");
	});
	const more = calls.length - MODEL_CALL_LINES;
	if (more > 0) lines.push(truncateToWidth(theme.fg("dim", `↳ … and ${more} more llm_query call${more === 1 ? "" : "s"}`), width, "…"));
	return lines;
}

/**
 * The last `keep` terminal rows of `lines` wrapped to `width`, how many lines are wholly hidden
 * above them, and whether the topmost line shown is cut (its start hidden). Only the lines that
 * show are wrapped, and of a very long line only its end.
 */
export function tailRows(lines: readonly string[], keep: number, width: number): { rows: string[]; hiddenLines: number; cutLine: boolean } {
	const picked: string[][] = [];
	let rowCount = 0;
	let index = lines.length - 1;
	let cutLine = false;
	while (index >= 0 && rowCount < keep) {
		const need = keep - rowCount;
		const { rows, cut } = lastRows(lines[index] ?? "", need, width);
		picked.push(rows);
		rowCount += rows.length;
		index--;
		if (cut) {
			cutLine = true;
			break;
		}
	}
	return { rows: picked.reverse().flat(), hiddenLines: index + 1, cutLine };
}

/** The last `need` rows of one line wrapped to `width`, and whether rows before them were left out. */
function lastRows(line: string, need: number, width: number): { rows: string[]; cut: boolean } {
	// A row holds at most `width` graphemes of one code unit or more; a wide margin keeps wrapping
	// of a long line's end bounded by what is shown, not by the line's length.
	const span = (need + 1) * width * 4 + 16;
	if (line.length > span) {
		const rows = wrapLine(line.slice(line.length - span), width);
		// The first row may start inside a word or a character: it is never shown.
		const usable = rows.length > 1 ? rows.slice(1) : rows;
		return { rows: usable.slice(-need), cut: true };
	}
	const rows = wrapLine(line, width);
	return rows.length > need ? { rows: rows.slice(-need), cut: true } : { rows, cut: false };
}

/** All the code, with a gutter, wrapped to `width`. */
function codeBlock(code: string, width: number, theme: RenderTheme): string[] {
	const text = sanitize(code.trimEnd());
	if (text === "") return [];
	const gutter = width >= 6 ? "│ " : "";
	const inner = Math.max(1, width - visibleWidth(gutter));
	const lines: string[] = [];
	for (const source of text.split("\n")) {
		for (const piece of wrapLine(source, inner)) lines.push(`${theme.fg("dim", gutter)}${piece}`);
	}
	return lines;
}

/**
 * A component whose lines are drawn for the width pi gives it. pi draws every frame; the lines
 * are kept for the last width (the view they come from is fixed when the component is made) and
 * drawn again only for a new width or after `invalidate()` (a theme change).
 */
export class DrawnLines implements Component {
	private drawn: { width: number; lines: string[] } | undefined;

	constructor(private readonly draw: (width: number) => string[]) {}

	render(width: number): string[] {
		if (this.drawn?.width !== width) this.drawn = { width, lines: this.draw(width) };
		return this.drawn.lines;
	}

	invalidate(): void {
		this.drawn = undefined;
	}
}
