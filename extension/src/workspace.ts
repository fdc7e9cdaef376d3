// The workspace of one pi session: the pi-repl server serving it, across deaths and respawns.
//
// Owns: the server's lifecycle for the session — start at `session_start`, respawn on the call
// after a death, stop at `session_shutdown` — and the words that tell the model when pi-repl
// stopped or could not start. Does not own: the MCP exchange (client.ts), the session key
// (session-key.ts), or what a cell's result means (result.ts).
//
// Invariants: a dead or missing pi-repl never throws into pi; every death is reported exactly
// once, to the call that ran into it (the call that was running, or else the next call, whose
// code then does not run), and the call after that starts a new server; `stop()` ends a start
// in flight rather than waiting for it; after `stop()` nothing is spawned again and no process
// is left.

import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import type { BinaryResolution } from "./binary.js";
import { type CallOptions, type CallOutcome, type HostToolsAnswerer, ReplClient, type SamplingAnswerer, StartError } from "./client.js";
import { AGENT_WORKSPACE_VAR, type PiAgentsAnswerer } from "./pi-agents.js";
import { describeExit, type ExitInfo } from "./process.js";
import { type SessionPlan, serverArgs } from "./session-key.js";

export interface WorkspaceOptions {
	/** Finds the binary; called before every spawn, so installing pi-repl mid-session works. */
	resolveBinary: () => BinaryResolution;
	plan: SessionPlan;
	cwd: string;
	env: Record<string, string | undefined>;
	/** Largest message accepted from the server (default: the transport's cap; tests lower it). */
	maxMessageBytes?: number;
	/** Answers a cell's `llm_query` (sampling requests) for every server of the session. */
	sampling?: SamplingAnswerer;
	/** Runs a cell's host tools (`tools.<name>(...)`) for every server of the session. */
	hostTools?: HostToolsAnswerer;
	/** Takes the agent frames of every server of the session. */
	onAgentFrames?: (params: unknown) => void;
	/** Gives the command line of a sub-agent started as a pi process. */
	piAgents?: PiAgentsAnswerer;
}

export type StartResult =
	| { ok: true; tool: Tool; binary: string; notes: string[] }
	| { ok: false; message: string };

/** How one call ended, as far as the workspace is concerned. */
export type ExecuteOutcome =
	| Extract<CallOutcome, { kind: "result" | "cancelled" | "protocol-error" | "too-large" }>
	/** pi-repl stopped (during this call, or since the last one); the next call starts it again. */
	| { kind: "stopped"; message: string; exit: ExitInfo }
	/** pi-repl could not be started (not installed, or it failed to boot). */
	| { kind: "unavailable"; message: string };

export class Workspace {
	private client: ReplClient | undefined;
	private starting: Promise<ReplClient> | undefined;
	private unreportedDeath: { exit: ExitInfo; stderr: string } | undefined;
	private closed = false;
	/** Aborted by `stop()`: ends a start in flight instead of waiting for it. */
	private readonly stopping = new AbortController();
	private plan: SessionPlan;

	constructor(private readonly options: WorkspaceOptions) {
		this.plan = { ...options.plan };
	}

	/** The pid of the running server, if any. */
	get pid(): number | undefined {
		return this.client?.alive ? this.client.process.pid : undefined;
	}

	/** Starts the server and returns the `execute` tool it serves (for registration). */
	async start(): Promise<StartResult> {
		const notes: string[] = [];
		try {
			const client = await this.ensureClient();
			return { ok: true, tool: client.tool, binary: client.process.command, notes };
		} catch (error) {
			if (this.plan.forkFrom && error instanceof StartError && error.exit && !error.stopped && !this.closed) {
				// A parent that pi-repl cannot fork from (never ran with --repl, pruned) must not cost
				// the session its workspace: start it without the parent's state, and say so.
				notes.push(
					`could not inherit the workspace of ${this.plan.forkFrom}; starting without it (${firstLine(error.stderr) || error.message})`,
				);
				this.plan = { ...this.plan, forkFrom: undefined, forkAt: undefined };
				try {
					const client = await this.ensureClient();
					return { ok: true, tool: client.tool, binary: client.process.command, notes };
				} catch (retryError) {
					return { ok: false, message: startFailure(retryError) };
				}
			}
			return { ok: false, message: startFailure(error) };
		}
	}

	/** Runs one cell in the workspace. Never throws. */
	async execute(args: Record<string, unknown>, options: CallOptions = {}): Promise<ExecuteOutcome> {
		// A server that has just exited is recorded once its pipes drain: wait for that record.
		if (this.client && !this.client.alive) await this.client.process.exited;
		if (this.unreportedDeath) {
			const { exit, stderr } = this.unreportedDeath;
			this.unreportedDeath = undefined;
			return { kind: "stopped", exit, message: stoppedMessage("since the last call", exit, stderr, true) };
		}
		let client: ReplClient;
		try {
			client = await this.ensureClient();
		} catch (error) {
			return { kind: "unavailable", message: startFailure(error) };
		}
		const outcome = await client.execute(args, options);
		if (outcome.kind === "died" || outcome.kind === "unresponsive") {
			if (this.client === client) this.client = undefined;
			this.unreportedDeath = undefined;
			const when = outcome.kind === "died" ? "while running this cell" : "answering (no output or heartbeat for 90 s) and was killed";
			return { kind: "stopped", exit: outcome.exit, message: stoppedMessage(when, outcome.exit, outcome.stderr, false) };
		}
		return outcome;
	}

	/**
	 * Stops the server and waits until it is gone; nothing is spawned afterwards. A start in flight
	 * is ended (its process terminated), not waited for: a first start may take minutes.
	 */
	async stop(): Promise<void> {
		this.closed = true;
		this.stopping.abort();
		const pending = this.starting;
		if (pending) await pending.catch(() => undefined);
		const client = this.client;
		this.client = undefined;
		if (client) await client.stop();
	}

	private async ensureClient(): Promise<ReplClient> {
		if (this.closed) throw new StartError("pi-repl was stopped with the session", undefined, "", true);
		if (this.client?.alive) return this.client;
		if (this.starting) return this.starting;
		this.starting = this.spawn();
		try {
			return await this.starting;
		} finally {
			this.starting = undefined;
		}
	}

	private async spawn(): Promise<ReplClient> {
		const binary = this.options.resolveBinary();
		if (!binary.ok) throw new StartError(binary.message, undefined, "");
		// A sub-agent started as a pi process serves the workspace its parent prepared (pi-agents.ts).
		const agentWorkspace = this.options.env[AGENT_WORKSPACE_VAR];
		const args = agentWorkspace
			? ["mcp", "--cwd", this.options.cwd, "--wait-ms", "end", "--agent-workspace", agentWorkspace]
			: serverArgs(this.options.cwd, this.plan);
		const client = await ReplClient.start(binary.path, args, {
			cwd: this.options.cwd,
			env: this.options.env,
			maxMessageBytes: this.options.maxMessageBytes,
			signal: this.stopping.signal,
			sampling: this.options.sampling,
			hostTools: this.options.hostTools,
			onAgentFrames: this.options.onAgentFrames,
			piAgents: this.options.piAgents,
		});
		if (this.closed) {
			await client.stop();
			throw new StartError("pi-repl was stopped with the session", undefined, "", true);
		}
		// Once forked, the session has its own snapshot: a respawn must not ask for the parent again.
		this.plan = { ...this.plan, forkFrom: undefined, forkAt: undefined };
		this.client = client;
		void client.process.exited.then((exit) => {
			if (this.client !== client || exit.requested) return;
			this.client = undefined;
			this.unreportedDeath = { exit, stderr: client.process.stderrTail() };
		});
		return client;
	}
}

/** The model-facing text for a server that stopped. */
export function stoppedMessage(when: string, exit: ExitInfo, stderr: string, codeSkipped: boolean): string {
	const lines = [`pi-repl stopped ${when}: it ${describeExit(exit)}.`];
	if (codeSkipped) lines.push("The code of this call did not run.");
	if (stderr.trim() !== "") lines.push("Its last output on stderr:", indent(stderr));
	lines.push(
		"The next execute call starts it again; the workspace comes back from its last snapshot, so anything defined after that is gone: check before relying on it.",
	);
	return lines.join("\n");
}

function startFailure(error: unknown): string {
	if (error instanceof StartError && error.stopped) return error.message;
	if (error instanceof StartError) {
		const lines = [error.message];
		if (error.stderr.trim() !== "") lines.push("Its last output on stderr:", indent(error.stderr));
		if (error.exit || error.stderr) lines.push("The next execute call tries to start it again.");
		return lines.join("\n");
	}
	return `pi-repl did not start: ${error instanceof Error ? error.message : String(error)}`;
}

function indent(text: string): string {
	return text
		.split("\n")
		.map((line) => `  ${line}`)
		.join("\n");
}

function firstLine(text: string): string {
	const lines = text.split("\n").filter((line) => line.trim() !== "");
	return (lines.find((line) => /error/i.test(line)) ?? lines[0] ?? "").trim();
}
