// How an `execute` call looks in pi's terminal UI.
//
// Owns: the compact view (one header line — status, duration, first line of code — and a short
// tail of output) and the expanded view (all the code, all the output), laid out for a given
// width. Pure functions of (view, width, theme) → lines, so they are tested without a terminal.
// Does not own: images (pi draws the result's image content itself) or the row's frame and
// background (pi's default tool shell).
//
// Invariants: no line is wider than the width it was drawn for, at any width; cell output is
// shown as plain text (escape sequences, carriage-return redraws and control characters from
// the kernel are neutralised, tabs expanded), so a cell cannot corrupt the screen.

import type { Component } from "@mariozechner/pi-tui";
import { truncateToWidth, visibleWidth, wrapTextWithAnsi } from "@mariozechner/pi-tui";
import type { ExecuteStatus, ResetInfo } from "./result.js";

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
}

/** Output lines shown under the header when collapsed. */
export const COLLAPSED_TAIL_LINES = 4;
/** Output lines shown while a cell is running. */
export const RUNNING_TAIL_LINES = 6;
const TAB_STOP = 4;
const RESET_BLOCK = /<repl_engine_reset>[\s\S]*?<\/repl_engine_reset>\n?/g;

const ICONS: Record<ExecuteStatus, { icon: string; color: ThemeColorName; word?: string }> = {
	running: { icon: "●", color: "warning", word: "running" },
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
			return expandTabs(visible);
		})
		.join("\n");
}

function expandTabs(line: string): string {
	if (!line.includes("\t")) return line;
	let out = "";
	for (const char of line) {
		if (char === "\t") out += " ".repeat(TAB_STOP - (visibleWidth(out) % TAB_STOP));
		else out += char;
	}
	return out;
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
	const lines = sanitize(code.replace(/\s+$/, "")).split("\n");
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
	if (first) line += `  ${first}`;
	if (lines > 1) line += theme.fg("dim", ` (+${lines - 1} line${lines === 2 ? "" : "s"})`);
	return truncateToWidth(line, Math.max(1, width), "…");
}

/** The lines under the header: a short tail when collapsed, everything when expanded. */
export function bodyLines(view: CallView, width: number, theme: RenderTheme, expandHint: string): string[] {
	const w = Math.max(1, width);
	const lines: string[] = [];
	const output = sanitize(view.output).replace(/\s+$/, "");
	if (view.expanded) {
		lines.push(...codeBlock(view.code, w, theme));
		if (output !== "") {
			lines.push("");
			for (const line of wrap(output, w)) lines.push(theme.fg("toolOutput", line));
		}
		return lines;
	}
	if (view.reset) {
		lines.push(truncateToWidth(theme.fg("warning", `↻ workspace restarted: ${view.reset.reason}`), w, "…"));
	}
	const shown = view.reset ? output.replace(RESET_BLOCK, "").replace(/^\s+/, "") : output;
	if (shown === "") return lines;
	const all = shown.split("\n");
	const keep = view.status === "running" ? RUNNING_TAIL_LINES : COLLAPSED_TAIL_LINES;
	const tail = all.slice(-keep);
	const hidden = all.length - tail.length;
	if (hidden > 0 && view.status !== "running") {
		lines.push(truncateToWidth(theme.fg("dim", `… ${hidden} earlier line${hidden === 1 ? "" : "s"}${expandHint ? `, ${expandHint}` : ""}`), w, "…"));
	}
	for (const line of tail) lines.push(truncateToWidth(theme.fg("toolOutput", line), w, "…"));
	return lines;
}

/** All the code, with a gutter, wrapped to `width`. */
function codeBlock(code: string, width: number, theme: RenderTheme): string[] {
	const text = sanitize(code.replace(/\s+$/, ""));
	if (text === "") return [];
	const gutter = width >= 6 ? "│ " : "";
	const inner = Math.max(1, width - visibleWidth(gutter));
	const lines: string[] = [];
	for (const source of text.split("\n")) {
		for (const piece of wrap(source, inner)) lines.push(`${theme.fg("dim", gutter)}${piece}`);
	}
	return lines;
}

function wrap(text: string, width: number): string[] {
	return wrapTextWithAnsi(text, width).map((line) => (visibleWidth(line) > width ? truncateToWidth(line, width, "") : line));
}

/** A component whose lines are drawn for the width pi gives it. */
export class DrawnLines implements Component {
	constructor(private readonly draw: (width: number) => string[]) {}

	render(width: number): string[] {
		return this.draw(width);
	}

	invalidate(): void {
		// Nothing is cached: every render draws from the current state.
	}
}
