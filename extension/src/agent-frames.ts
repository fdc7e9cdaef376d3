// Sub-agents under the cell that spawned them: the frames pi-repl streams, kept and drawn.
//
// pi-repl sends `notifications/pi-repl/agents` (`{agents: [frame, ...]}`, every child of the
// session spawned while it runs; see its `src/mcp/agent_frames.rs`) to a client that declared the
// experimental capability `pi-repl/agent-frames`, each time a child's record changes. This file
// keeps the latest frame of each child (`AgentFrames`), tells the rows that show them to repaint
// (on each change, and every `TICK_MS` while a child runs, for its elapsed time; the ticking stops
// when none runs), and draws them (`agentFrameLines`, a pure function of frames, width and time).
//
// How they look, under the call's header (so they show collapsed or expanded):
//   ↳ ● slow  running 12s · step 3: reading requests_df
//   ↳ ● errors  running 4.1s
//   ↳ 1 more sub-agent settled: 1 completed
// and once every child of the cell has settled, one line: `↳ 2 sub-agents: 1 completed, 1 errored`.
//
// Invariants: no line wider than the width; at most `FRAME_LINES` running frames and one count
// line; a child's text is sanitised like cell output.

import { truncateToWidth } from "@mariozechner/pi-tui";
import { formatDuration, type RenderTheme, sanitize } from "./render.js";

export const AGENT_FRAMES_METHOD = "notifications/pi-repl/agents";
export const AGENT_FRAMES_CAPABILITY = "pi-repl/agent-frames";
/** Running children drawn one per line; more are counted. */
export const FRAME_LINES = 4;
/** How often rows with a running child repaint (the elapsed time). */
export const TICK_MS = 1_000;

export type AgentStatus = "running" | "completed" | "errored" | "cancelled" | "lost";

/** One child as pi-repl streams it. */
export interface AgentFrame {
	id: string;
	name?: string | null;
	/** The spawning cell. */
	cell: number;
	/** The progress token (= JSON-RPC id) of the call that started that cell, when known. */
	call?: string | number | null;
	status: AgentStatus;
	/** RFC 3339. */
	started: string;
	elapsed_ms?: number | null;
	steps?: number;
	last_line?: string | null;
	error?: string | null;
}

/** Reads a notification's params; frames that do not have the expected shape are skipped. */
export function framesOf(params: unknown): AgentFrame[] {
	const list = (params as { agents?: unknown } | undefined)?.agents;
	if (!Array.isArray(list)) return [];
	return list.filter(
		(f): f is AgentFrame =>
			typeof f === "object" && f !== null && typeof f.id === "string" && typeof f.cell === "number" && typeof f.status === "string" && typeof f.started === "string",
	);
}

/** The latest frame of every child, and who to tell when they change. */
export class AgentFrames {
	private readonly byId = new Map<string, AgentFrame>();
	private readonly listeners = new Set<() => void>();
	private ticker: NodeJS.Timeout | undefined;

	update(frames: AgentFrame[]): void {
		for (const frame of frames) this.byId.set(frame.id, frame);
		this.notify();
		this.tickWhileRunning();
	}

	/** The children of a call's cell: by the call's request id, or by the cell's number. */
	forCall(call: { requestId?: string | number; cell?: number }): AgentFrame[] {
		const found: AgentFrame[] = [];
		for (const frame of this.byId.values()) {
			const byCall = call.requestId !== undefined && frame.call === call.requestId;
			const byCell = call.cell !== undefined && frame.cell === call.cell;
			if (byCall || byCell) found.push(frame);
		}
		return found;
	}

	running(): number {
		let count = 0;
		for (const frame of this.byId.values()) if (frame.status === "running") count++;
		return count;
	}

	/** Called on every change and every tick while a child runs; returns the unsubscribe. */
	subscribe(listener: () => void): () => void {
		this.listeners.add(listener);
		return () => this.listeners.delete(listener);
	}

	/** Stops ticking (the session ended). */
	close(): void {
		if (this.ticker) clearInterval(this.ticker);
		this.ticker = undefined;
		this.listeners.clear();
	}

	private notify(): void {
		for (const listener of [...this.listeners]) {
			try {
				listener();
			} catch {
				// A row that can no longer repaint (its session ended) is not this store's problem.
			}
		}
	}

	private tickWhileRunning(): void {
		if (this.running() === 0) {
			if (this.ticker) clearInterval(this.ticker);
			this.ticker = undefined;
			return;
		}
		if (this.ticker) return;
		this.ticker = setInterval(() => {
			if (this.running() === 0) this.tickWhileRunning();
			else this.notify();
		}, TICK_MS);
		this.ticker.unref();
	}
}

const SETTLED_ORDER: AgentStatus[] = ["completed", "errored", "cancelled", "lost"];

/** The lines drawn under a call for its children (none: no line). */
export function agentFrameLines(frames: readonly AgentFrame[], width: number, theme: RenderTheme, now: number): string[] {
	const w = Math.max(1, width);
	if (frames.length === 0) return [];
	const running = frames.filter((f) => f.status === "running");
	const settled = frames.filter((f) => f.status !== "running");
	const arrow = theme.fg("accent", "↳");
	if (running.length === 0) {
		const s = frames.length === 1 ? "" : "s";
		return [truncateToWidth(`${arrow} ${theme.fg("dim", `${frames.length} sub-agent${s}: ${countText(settled)}`)}`, w, "…")];
	}
	const lines = running.slice(0, FRAME_LINES).map((frame) => {
		const name = oneLine(frame.name || frame.id);
		const elapsed = formatDuration(Math.max(0, now - Date.parse(frame.started)));
		const last = frame.last_line ? ` · ${oneLine(frame.last_line)}` : "";
		return truncateToWidth(`${arrow} ${theme.fg("warning", "●")} ${theme.bold(name)}  ${theme.fg("dim", `running ${elapsed}`)}${theme.fg("muted", last)}`, w, "…");
	});
	const more = running.length - FRAME_LINES;
	const parts: string[] = [];
	if (more > 0) parts.push(`${more} more running`);
	if (settled.length > 0) parts.push(`${settled.length} settled: ${countText(settled)}`);
	if (parts.length > 0) lines.push(truncateToWidth(`${arrow} ${theme.fg("dim", `… ${parts.join("; ")}`)}`, w, "…"));
	return lines;
}

/** "2 completed, 1 errored". */
function countText(frames: readonly AgentFrame[]): string {
	const counts = new Map<string, number>();
	for (const frame of frames) counts.set(frame.status, (counts.get(frame.status) ?? 0) + 1);
	return SETTLED_ORDER.filter((status) => counts.has(status))
		.map((status) => `${counts.get(status)} ${status}`)
		.join(", ");
}

function oneLine(text: string): string {
	return sanitize(text.slice(0, 400)).replace(/\s+/g, " ").trim();
}
