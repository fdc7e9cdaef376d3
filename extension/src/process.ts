// The `pi-repl mcp` child process.
//
// Owns: spawning it, keeping the tail of its stderr (pi-repl logs there; it is shown when the
// server stops unexpectedly), knowing how and when it exited, and stopping it. Does not own: the
// MCP messages on its stdin/stdout (transport.ts) or when to respawn (workspace.ts).
//
// Invariants: no error from the child or its pipes is ever thrown into pi (a dead child is a
// state, reported through `exited`); `stop()` always ends with the process gone: it closes stdin
// (pi-repl then aborts the running cell and stops its kernel), escalates to SIGTERM and then
// SIGKILL, and resolves only once the process has exited; `terminate()` does the same for a
// process still starting, without the stdin grace, because pi's print mode cannot exit
// while a child lives (docs/traps.md, trap 8).

import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";

/** How long pi-repl gets to stop by itself after its stdin closes. */
export const STOP_STDIN_GRACE_MS = 3_000;
/** How long it gets after SIGTERM before SIGKILL. */
export const STOP_TERM_GRACE_MS = 2_000;
/** Bytes of stderr kept for reports. */
const STDERR_KEEP_BYTES = 16 * 1024;

/** How the process ended. */
export interface ExitInfo {
	code: number | null;
	signal: NodeJS.Signals | null;
	/** Set when the process could not be started at all (ENOENT, EACCES, ...). */
	spawnError?: string;
	/** True when it ended because `stop()` or `kill()` asked it to. */
	requested: boolean;
}

export interface SpawnOptions {
	cwd: string;
	env: Record<string, string | undefined>;
}

/** One running (or ended) `pi-repl mcp`. */
export class ServerProcess {
	readonly child: ChildProcessWithoutNullStreams;
	/** Resolves once the process has exited (or failed to start); never rejects. */
	readonly exited: Promise<ExitInfo>;
	private exitInfo: ExitInfo | undefined;
	private stderrChunks: Buffer[] = [];
	private stderrBytes = 0;
	private stopRequested = false;

	constructor(
		readonly command: string,
		readonly args: string[],
		options: SpawnOptions,
	) {
		this.child = spawn(command, args, {
			cwd: options.cwd,
			env: options.env,
			stdio: ["pipe", "pipe", "pipe"],
		});
		this.exited = new Promise<ExitInfo>((resolveExit) => {
			const settle = (info: Omit<ExitInfo, "requested">) => {
				if (this.exitInfo) return;
				this.exitInfo = { ...info, requested: this.stopRequested };
				resolveExit(this.exitInfo);
			};
			this.child.once("error", (error: NodeJS.ErrnoException) => {
				// Only a failed spawn leaves no pid; other errors (a failed kill) are not an exit.
				if (this.child.pid === undefined) settle({ code: null, signal: null, spawnError: error.message });
			});
			// "close" (not "exit"): the pipes are drained, so the stderr tail is complete.
			this.child.once("close", (code, signal) => settle({ code, signal }));
		});
		this.child.stderr.on("data", (chunk: Buffer) => this.keepStderr(chunk));
		// A write to a child that just died fails with EPIPE: that is an exit, reported as such.
		this.child.stdin.on("error", () => undefined);
		this.child.stdout.on("error", () => undefined);
		this.child.stderr.on("error", () => undefined);
	}

	get pid(): number | undefined {
		return this.child.pid;
	}

	/**
	 * False once the process has ended. Turns false at its exit (when it is reaped), a moment
	 * before `exited` settles (which waits for its pipes to drain).
	 */
	get running(): boolean {
		return !this.exitInfo && this.child.exitCode === null && this.child.signalCode === null && this.child.pid !== undefined;
	}

	/** How it exited, once it has. */
	get exit(): ExitInfo | undefined {
		return this.exitInfo;
	}

	/** The last `maxLines` lines of stderr (at most `maxChars` characters). */
	stderrTail(maxLines = 12, maxChars = 2_000): string {
		// pi-repl colours its logs even into a pipe: keep the words, drop the escapes.
		const text = Buffer.concat(this.stderrChunks).toString("utf8").replace(/\x1b\[[0-?]*[ -/]*[@-~]/g, "");
		const lines = text.split("\n").filter((line) => line.trim() !== "");
		let tail = lines.slice(-maxLines).join("\n");
		if (tail.length > maxChars) tail = `…${tail.slice(tail.length - maxChars)}`;
		return tail;
	}

	/** Ends the process and waits until it is gone (stdin close, then SIGTERM, then SIGKILL). */
	async stop(): Promise<ExitInfo> {
		if (this.exitInfo) return this.exitInfo;
		this.stopRequested = true;
		this.child.stdin.end();
		if (await this.exitsWithin(STOP_STDIN_GRACE_MS)) return this.exited;
		this.signal("SIGTERM");
		if (await this.exitsWithin(STOP_TERM_GRACE_MS)) return this.exited;
		this.signal("SIGKILL");
		return this.exited;
	}

	/**
	 * Ends a process that is still starting (it serves no call, so there is nothing to finish):
	 * closes stdin and sends SIGTERM at once, SIGKILL after `STOP_TERM_GRACE_MS`, and waits until it
	 * is gone.
	 */
	async terminate(): Promise<ExitInfo> {
		if (this.exitInfo) return this.exitInfo;
		this.stopRequested = true;
		this.child.stdin.end();
		this.signal("SIGTERM");
		if (await this.exitsWithin(STOP_TERM_GRACE_MS)) return this.exited;
		this.signal("SIGKILL");
		return this.exited;
	}

	/** Kills the process at once (it stopped answering) and waits until it is gone. */
	async kill(): Promise<ExitInfo> {
		if (this.exitInfo) return this.exitInfo;
		this.stopRequested = true;
		this.signal("SIGKILL");
		return this.exited;
	}

	private signal(signal: NodeJS.Signals): void {
		try {
			this.child.kill(signal);
		} catch {
			// Already gone: `exited` settles by itself.
		}
	}

	private async exitsWithin(ms: number): Promise<boolean> {
		let timer: NodeJS.Timeout | undefined;
		const timeout = new Promise<false>((resolveTimeout) => {
			timer = setTimeout(() => resolveTimeout(false), ms);
		});
		const result = await Promise.race([this.exited.then(() => true), timeout]);
		clearTimeout(timer);
		return result;
	}

	private keepStderr(chunk: Buffer): void {
		this.stderrChunks.push(chunk);
		this.stderrBytes += chunk.length;
		while (this.stderrBytes > STDERR_KEEP_BYTES && this.stderrChunks.length > 1) {
			const dropped = this.stderrChunks.shift();
			this.stderrBytes -= dropped?.length ?? 0;
		}
	}
}

/** "exit code 1", "signal SIGKILL", or why it never started. */
export function describeExit(exit: ExitInfo): string {
	if (exit.spawnError) return `could not be started (${exit.spawnError})`;
	if (exit.signal) return `was killed by signal ${exit.signal}`;
	return `exited with code ${exit.code ?? "unknown"}`;
}
