// Running the real `pi` (from npm) with this extension and the scripted model, offline.
//
// Owns: an isolated pi (its own PI_CODING_AGENT_DIR, HOME, project dir, PI_REPL_HOME; PI_OFFLINE,
// no telemetry, no credentials), one-shot runs in print or JSON mode, an RPC-mode session, and
// reading what the scripted model recorded.

import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { MARK_VAR, newMark, PACKAGE_DIR, PI_BIN, replBinary, replEnv, SCRIPTED_PROVIDER, tempDir } from "./env.js";
import { poll } from "./eventually.js";

/** A step of the scripted model (see tests/fixtures/scripted-provider.ts). */
export interface Step {
	call?: { code?: string; timeout_ms?: number; wait_ms?: number; cell?: number; interrupt?: boolean };
	tool?: string;
	args?: Record<string, unknown>;
	say?: string;
	killServer?: "SIGKILL" | "SIGTERM";
	/** The model "thinks" this long before answering (the workload, never a wait for pi-repl). */
	delayMs?: number;
	/** The model first waits until pi-repl's session snapshot holds this binding (a save committed it). */
	waitSaved?: string;
}

/** What the scripted model recorded for one LLM request. */
export interface ModelRecord {
	request: number;
	/** When the request reached the model (ms since epoch). */
	at: number;
	tools: string[];
	toolDescriptions: Record<string, string>;
	systemPrompt: string;
	lastToolResult: {
		toolName: string;
		isError: boolean;
		content: { type: string; text?: string; mimeType?: string; bytes?: number }[];
	} | null;
	children: { pid: number; argv: string[] }[];
	killed: number[];
	/** For a `waitSaved` step: whether the binding was saved (false: it never was, within 120 s). */
	saved?: boolean;
}

/** What the scripted model recorded for a plain completion (a cell's `llm_query`), or its abort. */
export interface CompletionRecord {
	kind: "completion" | "completion-aborted";
	at: number;
	/** The last user message's text. */
	prompt: string;
	systemPrompt?: string;
	messages?: number;
	maxTokens?: number;
	apiKey?: string;
}

/** One isolated pi installation and project. */
export class PiSandbox {
	readonly root = tempDir("pi");
	readonly agentDir = join(this.root, "agent");
	readonly home = join(this.root, "home");
	readonly project = join(this.root, "project");
	readonly replHome = join(this.root, "repl-home");
	readonly scriptFile = join(this.root, "script.json");
	readonly recordFile = join(this.root, "record.jsonl");
	readonly mark = newMark();

	constructor() {
		for (const dir of [this.agentDir, this.home, this.project, this.replHome]) mkdirSync(dir, { recursive: true });
	}

	script(steps: Step[]): void {
		writeFileSync(this.scriptFile, JSON.stringify({ steps }));
		writeFileSync(this.recordFile, "");
	}

	/** The agent's turns the scripted model answered. */
	records(): ModelRecord[] {
		return this.recorded().filter((entry) => entry.kind === "turn") as unknown as ModelRecord[];
	}

	/** The plain completions (a cell's `llm_query`) the scripted model answered, and their aborts. */
	completions(): CompletionRecord[] {
		return this.recorded().filter((entry) => entry.kind !== "turn") as unknown as CompletionRecord[];
	}

	private recorded(): Record<string, unknown>[] {
		if (!existsSync(this.recordFile)) return [];
		return readFileSync(this.recordFile, "utf8")
			.split("\n")
			.filter((line) => line.trim() !== "")
			.map((line) => JSON.parse(line) as Record<string, unknown>);
	}

	env(extra: Record<string, string> = {}): Record<string, string> {
		return {
			...replEnv(this.mark, this.replHome),
			HOME: this.home,
			PI_CODING_AGENT_DIR: this.agentDir,
			PI_OFFLINE: "1",
			PI_TELEMETRY: "0",
			PI_SKIP_VERSION_CHECK: "1",
			PI_REPL_BIN: replBinary(),
			PI_REPL_TEST_SCRIPT: this.scriptFile,
			PI_REPL_TEST_RECORD: this.recordFile,
			...extra,
		};
	}

	/**
	 * pi's argv: the flags first (a boolean extension flag followed by a bare word would take the
	 * word as its value — pi's parser), then the prompt.
	 */
	args(flags: string[], prompt?: string): string[] {
		const args = ["-e", PACKAGE_DIR, "-e", SCRIPTED_PROVIDER, "--provider", "scripted", "--model", "scripted-1", ...flags];
		if (prompt !== undefined) args.push(prompt);
		return args;
	}
}

export interface RunResult {
	code: number | null;
	signal: NodeJS.Signals | null;
	stdout: string;
	stderr: string;
	/** From spawn to exit. */
	durationMs: number;
	/** When pi exited (ms since epoch). */
	endedAt: number;
	/** JSON lines of stdout (JSON mode), unparseable lines skipped. */
	events: Record<string, any>[];
}

/** Runs pi to completion (print or JSON mode). Kills it after `timeoutMs`. */
export function runPi(
	sandbox: PiSandbox,
	flags: string[],
	prompt: string,
	options: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<RunResult> {
	const started = Date.now();
	const child = spawn(PI_BIN, sandbox.args(flags, prompt), {
		cwd: sandbox.project,
		env: sandbox.env(options.env),
		stdio: ["ignore", "pipe", "pipe"],
	});
	let stdout = "";
	let stderr = "";
	child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
	child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
	const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 60_000);
	return new Promise((resolveRun) => {
		child.once("close", (code, signal) => {
			clearTimeout(timer);
			const endedAt = Date.now();
			resolveRun({ code, signal, stdout, stderr, durationMs: endedAt - started, endedAt, events: parseLines(stdout) });
		});
	});
}

function parseLines(text: string): Record<string, any>[] {
	const events: Record<string, any>[] = [];
	for (const line of text.split("\n")) {
		if (!line.startsWith("{")) continue;
		try {
			events.push(JSON.parse(line) as Record<string, any>);
		} catch {
			// not an event
		}
	}
	return events;
}

/** pi in RPC mode: commands on stdin, events on stdout. */
export class RpcPi {
	readonly events: Record<string, any>[] = [];
	private readonly child: ChildProcess;
	private buffer = "";
	private nextId = 1;
	private exitedWith: { code: number | null; signal: NodeJS.Signals | null } | undefined;
	readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
	stderr = "";

	constructor(
		readonly sandbox: PiSandbox,
		flags: string[],
		env: Record<string, string> = {},
	) {
		this.child = spawn(PI_BIN, sandbox.args(["--mode", "rpc", ...flags]), {
			cwd: sandbox.project,
			env: sandbox.env(env),
			stdio: ["pipe", "pipe", "pipe"],
		});
		this.child.stdout?.on("data", (chunk: Buffer) => {
			this.buffer += chunk.toString("utf8");
			let index = this.buffer.indexOf("\n");
			while (index !== -1) {
				const line = this.buffer.slice(0, index).replace(/\r$/, "");
				this.buffer = this.buffer.slice(index + 1);
				if (line.startsWith("{")) {
					try {
						this.events.push(JSON.parse(line) as Record<string, any>);
					} catch {
						// not an event
					}
				}
				index = this.buffer.indexOf("\n");
			}
		});
		this.child.stderr?.on("data", (chunk: Buffer) => (this.stderr += chunk.toString("utf8")));
		this.exited = new Promise((resolveExit) => {
			this.child.once("close", (code, signal) => {
				this.exitedWith = { code, signal };
				resolveExit(this.exitedWith);
			});
		});
	}

	get mark(): string {
		return this.sandbox.mark;
	}

	/** Sends a command and waits for its response. */
	async command(command: Record<string, unknown>, timeoutMs = 30_000): Promise<Record<string, any>> {
		const id = `t${this.nextId++}`;
		this.child.stdin?.write(`${JSON.stringify({ ...command, id })}\n`);
		return this.waitFor((event) => event.type === "response" && event.id === id, timeoutMs, `response to ${String(command.type)}`);
	}

	/** Sends a command without waiting. */
	send(command: Record<string, unknown>): void {
		this.child.stdin?.write(`${JSON.stringify(command)}\n`);
	}

	/** Sends a prompt and waits until the agent is done with it. */
	async prompt(message: string, timeoutMs = 60_000): Promise<Record<string, any>[]> {
		const from = this.events.length;
		const response = await this.command({ type: "prompt", message }, timeoutMs);
		if (response.success === false) throw new Error(`prompt rejected: ${JSON.stringify(response)}`);
		await this.waitFor((event, index) => index >= from && event.type === "agent_end", timeoutMs, "agent_end");
		return this.events.slice(from);
	}

	/** Waits for an event (at any index so far or later) matching `match`. */
	async waitFor(
		match: (event: Record<string, any>, index: number) => boolean,
		timeoutMs: number,
		what: string,
	): Promise<Record<string, any>> {
		type Seen = { event?: Record<string, any>; exited?: { code: number | null; signal: NodeJS.Signals | null } };
		const found = await poll((): Seen | undefined => {
			const index = this.events.findIndex(match);
			if (index !== -1) return { event: this.events[index] as Record<string, any> };
			if (this.exitedWith) return { exited: this.exitedWith };
			return undefined;
		}, timeoutMs);
		if (found?.event) return found.event;
		if (found?.exited) throw new Error(`pi exited (${JSON.stringify(found.exited)}) before ${what}; stderr:\n${this.stderr}`);
		throw new Error(`timed out waiting for ${what}; stderr:\n${this.stderr}`);
	}

	/** Ends pi the way a user would (stdin closed) and waits for it. */
	async close(timeoutMs = 15_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
		this.child.stdin?.end();
		const timer = setTimeout(() => this.child.kill("SIGKILL"), timeoutMs);
		const exit = await this.exited;
		clearTimeout(timer);
		return exit;
	}
}

export { MARK_VAR };
