// One MCP connection to one `pi-repl mcp` process.
//
// Owns: starting the server (spawn, `initialize`, `tools/list`) and ending a start when asked,
// one `tools/call execute` with the model's arguments as given, streamed output and
// cancellation, routing the server's `sampling/createMessage` requests (a cell's `llm_query`) to
// the answerer it was given (sampling.ts) and its host-tool requests (a cell's `tools.<name>(...)`,
// `pi-repl/hostTools/call` and `/list`) to the runner it was given (host-tools.ts), and stopping it. Does not own: respawning after a death (workspace.ts) or what a
// result means to pi (result.ts).
//
// Invariants: every call settles with a `CallOutcome`, never an exception: a result, a
// cancellation, an answer too large to accept, a server that died during the call, or one that
// stopped answering (then it is killed). A long cell is never cut short by the client: pi-repl
// sends a heartbeat every 10 s and each one resets the idle timer; there is no total limit (the
// model bounds a cell with `timeout_ms`, the human with Esc). An aborted start ends its process
// at once and fails with `stopped` set.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import {
	type CallToolResult,
	ErrorCode,
	McpError,
	CallToolResultSchema,
	CancelledNotificationSchema,
	type CreateMessageRequest,
	CreateMessageRequestSchema,
	type CreateMessageResult,
	type Tool,
} from "@modelcontextprotocol/sdk/types.js";
import { AGENT_FRAMES_CAPABILITY, AGENT_FRAMES_METHOD } from "./agent-frames.js";
import { PI_AGENTS_CAPABILITY, PI_AGENTS_COMMAND, type PiAgentsAnswerer } from "./pi-agents.js";
import { describeExit, type ExitInfo, ServerProcess, type SpawnOptions } from "./process.js";
import { MAX_MESSAGE_BYTES, type MessageTooLargeError, ProcessTransport } from "./transport.js";

/** The tool this extension serves. */
export const TOOL_NAME = "execute";
/**
 * How long the server may take to answer `initialize` and `tools/list`: `tools/list` waits for the
 * kernel to boot and load its helpers, and a first run may build pi-repl's Python environment.
 */
export const START_TIMEOUT_MS = 300_000;
/**
 * How long a call may go without any message from the server (output or heartbeat, every 10 s)
 * before the server is judged wedged and killed.
 */
export const CALL_IDLE_TIMEOUT_MS = 90_000;
/** Characters of streamed output a cancelled call keeps (all that is known of what the cell did). */
export const CANCELLED_OUTPUT_CHARS = 4_000;

/** How one `execute` call ended. */
export type CallOutcome =
	| { kind: "result"; result: CallToolResult }
	/**
	 * pi's abort signal fired. When the request had been sent, the SDK sent pi-repl
	 * `notifications/cancelled` and stopped waiting: pi-repl's answer (if any) is not seen, so how
	 * the cell ended is not known here.
	 */
	| {
			kind: "cancelled";
			/** False when the abort came before the request was sent: the code did not run. */
			sent: boolean;
			/** The last `CANCELLED_OUTPUT_CHARS` characters of output streamed before the cancellation. */
			output: string;
	  }
	/** The server process ended while the call was running. */
	| { kind: "died"; exit: ExitInfo; stderr: string }
	/** The server sent nothing for `CALL_IDLE_TIMEOUT_MS`; it was killed. */
	| { kind: "unresponsive"; exit: ExitInfo; stderr: string }
	/** The server answered with a protocol error (malformed arguments, ...). */
	| { kind: "protocol-error"; message: string }
	/**
	 * The call's answer was over the size cap and was dropped (its first bytes carried this call's
	 * id, or could not be identified); the call was withdrawn (an MCP cancellation) instead of
	 * waiting for an answer that will not come. The server lives on.
	 */
	| { kind: "too-large"; bytes: number; limit: number };

/** Why a start ended when the session ended first. */
export const STOPPED_WHILE_STARTING = "pi-repl was stopped with the session while it was starting";

/** A failed start: the process never served `tools/list`. */
export class StartError extends Error {
	constructor(
		message: string,
		readonly exit: ExitInfo | undefined,
		readonly stderr: string,
		/** True when the start was ended on purpose (the session ended), not by a failure. */
		readonly stopped = false,
	) {
		super(message);
		this.name = "StartError";
	}
}

/** How to start a server. */
export interface StartOptions extends SpawnOptions {
	/** Largest message accepted from the server (default `MAX_MESSAGE_BYTES`; tests lower it). */
	maxMessageBytes?: number;
	/** Aborting it ends a start in flight: the process is terminated and the start fails at once. */
	signal?: AbortSignal;
	/**
	 * Answers the server's `sampling/createMessage` requests; when given, the client declares the
	 * `sampling` capability. The signal aborts when the server cancels the request (the cell was
	 * interrupted). A throw becomes a JSON-RPC error (its `code` when it has one, its message).
	 */
	sampling?: SamplingAnswerer;
	/**
	 * Runs a cell's host tools; when given, the client declares the experimental capability
	 * `pi-repl/host-tools` and answers pi-repl's `pi-repl/hostTools/call` and `/list` requests. The
	 * signal aborts when pi-repl cancels the request (the cell was interrupted).
	 */
	hostTools?: HostToolsAnswerer;
	/**
	 * Takes pi-repl's agent frames (`notifications/pi-repl/agents` params: a cell's sub-agents);
	 * when given, the client declares the experimental capability `pi-repl/agent-frames`.
	 */
	onAgentFrames?: (params: unknown) => void;
	/**
	 * Gives the command line of a sub-agent as a pi process; when given, the client declares the
	 * experimental capability `pi-repl/pi-agents` and answers `pi-repl/agents/command`.
	 */
	piAgents?: PiAgentsAnswerer;
}

/** Answers a cell's host-tool requests (see `StartOptions.hostTools`). */
export interface HostToolsAnswerer {
	call(params: unknown, signal: AbortSignal): Promise<unknown>;
	list(): Promise<unknown>;
}

/** The experimental capability that tells pi-repl this client runs host tools for cells. */
export const HOST_TOOLS_CAPABILITY = "pi-repl/host-tools";
export const HOST_TOOLS_CALL = "pi-repl/hostTools/call";
export const HOST_TOOLS_LIST = "pi-repl/hostTools/list";

/** Answers one sampling request (see `StartOptions.sampling`). */
export type SamplingAnswerer = (params: CreateMessageRequest["params"], signal: AbortSignal) => Promise<CreateMessageResult>;

export interface CallOptions {
	signal?: AbortSignal;
	/** New output text, as it arrives. */
	onOutput?: (text: string) => void;
	/** The call's JSON-RPC id (also its progress token), once the request is sent. */
	onRequestId?: (id: string | number) => void;
}

/** A started server and the `execute` tool it serves. */
export class ReplClient {
	/** Settles when the process ends: the outcome of whatever call is running then. */
	private readonly death: Promise<Extract<CallOutcome, { kind: "died" }>>;
	/** The calls in flight (with their JSON-RPC id), failed when their answer is over the cap. */
	private readonly inFlight = new Set<{ id?: string | number; fail: (error: MessageTooLargeError) => void }>();
	/** Takes the id of the `tools/call` request being sent (set only while `callTool` sends it). */
	private captureId: ((id: string | number) => void) | undefined;

	private constructor(
		readonly process: ServerProcess,
		private readonly client: Client,
		transport: ProcessTransport,
		/** `execute` as listed by the server: description, schema, `_meta`. */
		readonly tool: Tool,
	) {
		this.death = process.exited.then((exit) => ({ kind: "died", exit, stderr: process.stderrTail() }));
		transport.onsend = (message) => {
			if (this.captureId && "method" in message && message.method === "tools/call" && "id" in message) this.captureId(message.id);
		};
		transport.onoverflow = (error) => {
			const whose = error.identity;
			// A notification (streamed output) is lost, but the call's answer is still to come.
			if (whose && "method" in whose) return;
			for (const call of this.inFlight) {
				// The answer to request N fails call N only; one that cannot be identified fails them all.
				if (!whose || call.id === undefined || call.id === whose.id) call.fail(error);
			}
		};
	}

	/** Spawns `command args`, initializes and lists tools. Throws `StartError` on failure. */
	static async start(command: string, args: string[], options: StartOptions): Promise<ReplClient> {
		const server = new ServerProcess(command, args, options);
		const transport = new ProcessTransport(server, options.maxMessageBytes ?? MAX_MESSAGE_BYTES);
		const capabilities: Record<string, unknown> = {};
		if (options.sampling) capabilities.sampling = {};
		const experimental: Record<string, object> = {};
		if (options.hostTools) experimental[HOST_TOOLS_CAPABILITY] = {};
		if (options.onAgentFrames) experimental[AGENT_FRAMES_CAPABILITY] = {};
		if (options.piAgents) experimental[PI_AGENTS_CAPABILITY] = {};
		if (Object.keys(experimental).length > 0) capabilities.experimental = experimental;
		const client = new Client({ name: "pi-repl-pi-extension", version: "0.1.0" }, { capabilities });
		const cancellable = trackCancellations(client);
		const answer = options.sampling;
		if (answer) answerSamplingWith(client, cancellable, answer);
		answerCustomRequestsWith(client, cancellable, options.hostTools, options.piAgents);
		const onAgentFrames = options.onAgentFrames;
		if (onAgentFrames) {
			// A custom notification: the SDK has no schema for it, so it arrives at the fallback.
			client.fallbackNotificationHandler = async (notification) => {
				if (notification.method === AGENT_FRAMES_METHOD) onAgentFrames(notification.params);
			};
		}
		// Protocol noise (a stray line) is not a failure of the call; deaths are seen via `exited`.
		client.onerror = () => undefined;
		const failed = server.exited.then((exit) => {
			throw new StartError(`pi-repl ${describeExit(exit)} before it was ready`, exit, server.stderrTail());
		});
		const oversized = new Promise<never>((_, reject) => {
			transport.onoverflow = (error) => reject(new StartError(`pi-repl did not start: ${error.message}`, undefined, server.stderrTail()));
		});
		// The session ended while pi-repl started (it may be building its environment or waiting for
		// a kernel, for minutes): end the process now instead of waiting for the start to finish.
		let onAbort: (() => void) | undefined;
		const abandoned = new Promise<never>((_, reject) => {
			onAbort = () => {
				void server.terminate().then((exit) => reject(new StartError(STOPPED_WHILE_STARTING, exit, server.stderrTail(), true)));
			};
			if (options.signal?.aborted) onAbort();
			else options.signal?.addEventListener("abort", onAbort, { once: true });
		});
		try {
			const tools = await Promise.race([
				(async () => {
					await client.connect(transport, { timeout: START_TIMEOUT_MS });
					return client.listTools(undefined, { timeout: START_TIMEOUT_MS });
				})(),
				failed,
				oversized,
				abandoned,
			]);
			// The stop may have come just as the answer did (pi-repl answers what it can as it exits):
			// a stopped start is a stopped start, whichever finished first.
			if (options.signal?.aborted) throw new StartError(STOPPED_WHILE_STARTING, undefined, "", true);
			const tool = tools.tools.find((t) => t.name === TOOL_NAME);
			if (!tool) throw new StartError(`pi-repl does not serve a tool named ${TOOL_NAME}`, undefined, server.stderrTail());
			return new ReplClient(server, client, transport, tool);
		} catch (error) {
			if (options.signal?.aborted) {
				// Whichever failure surfaced first (the exit it caused, a closed pipe), the cause is the stop.
				const exit = await server.terminate();
				throw new StartError(STOPPED_WHILE_STARTING, exit, server.stderrTail(), true);
			}
			if (error instanceof StartError) {
				await server.kill();
				throw error;
			}
			// A write to a process that is exiting fails first; its exit says more than EPIPE.
			const exited = await Promise.race([server.exited, delay(1_000)]);
			const exit = exited ?? (await server.kill());
			if (exited) throw new StartError(`pi-repl ${describeExit(exited)} before it was ready`, exited, server.stderrTail());
			const message = error instanceof Error ? error.message : String(error);
			throw new StartError(`pi-repl did not start: ${message}`, exit, server.stderrTail());
		} finally {
			// The process may end later (a death, not a failed start); a later abort is not this start's.
			failed.catch(() => undefined);
			oversized.catch(() => undefined);
			abandoned.catch(() => undefined);
			if (onAbort) options.signal?.removeEventListener("abort", onAbort);
		}
	}

	/** True until the process has exited. */
	get alive(): boolean {
		return this.process.running;
	}

	/** Runs one cell: `tools/call execute` with `args` exactly as given (pi-repl validates them). Never throws. */
	async execute(args: Record<string, unknown>, options: CallOptions = {}): Promise<CallOutcome> {
		const { signal, onOutput, onRequestId } = options;
		const died = this.death;
		// Withdraws the call when its answer is over the cap (the answer was dropped, none will come).
		const withdraw = new AbortController();
		let oversize: MessageTooLargeError | undefined;
		const entry: { id?: string | number; fail: (error: MessageTooLargeError) => void } = {
			fail: (error) => {
				oversize ??= error;
				withdraw.abort(error);
			},
		};
		this.inFlight.add(entry);
		const sent = !signal?.aborted;
		let streamed = "";
		// The SDK sends the request synchronously inside `callTool`: that is when its id is known.
		this.captureId = (id) => {
			entry.id = id;
			onRequestId?.(id);
		};
		const request = this.client.callTool({ name: TOOL_NAME, arguments: args }, CallToolResultSchema, {
			signal: eitherSignal(signal, withdraw.signal),
			timeout: CALL_IDLE_TIMEOUT_MS,
			resetTimeoutOnProgress: true,
			onprogress: (progress) => {
				if (typeof progress.message !== "string" || progress.message === "") return;
				streamed += progress.message;
				if (streamed.length > 2 * CANCELLED_OUTPUT_CHARS) streamed = streamed.slice(-CANCELLED_OUTPUT_CHARS);
				onOutput?.(progress.message);
			},
		});
		this.captureId = undefined;
		const call = request.then(
			(result): CallOutcome => ({ kind: "result", result: result as CallToolResult }),
			async (error: unknown): Promise<CallOutcome> => {
				if (oversize) return { kind: "too-large", bytes: oversize.bytes, limit: oversize.limit };
				if (signal?.aborted) return { kind: "cancelled", sent, output: streamed.slice(-CANCELLED_OUTPUT_CHARS) };
				if (this.process.exit) return died;
				if (isTimeout(error)) {
					const exit = await this.process.kill();
					return { kind: "unresponsive", exit, stderr: this.process.stderrTail() };
				}
				// The connection closes a moment before the process is reaped: wait for it briefly.
				const exit = await Promise.race([this.process.exited, delay(1_000)]);
				if (exit) return died;
				return { kind: "protocol-error", message: error instanceof Error ? error.message : String(error) };
			},
		);
		try {
			return await Promise.race([call, died]);
		} finally {
			this.inFlight.delete(entry);
		}
	}

	/** Stops the server (and its kernel) and waits until the process is gone. */
	async stop(): Promise<ExitInfo> {
		try {
			await this.client.close();
		} catch {
			// close() stops the process through the transport; `exited` below is the truth.
		}
		return this.process.stop();
	}
}

/** The server's requests being answered, by id: aborted when the server cancels one. */
type Cancellable = Map<string | number, AbortController>;

/**
 * Tracks the server's cancellations of its requests to this client. The SDK (1.32.2) ignores a
 * cancellation of request id 0 (`if (!requestId) return`), and pi-repl (rmcp) numbers its
 * requests from 0, so its first request could never be cancelled: the cancellations are tracked
 * here, for every id, before the SDK's own handling (which stops the reply to an id it does cancel).
 */
function trackCancellations(client: Client): Cancellable {
	const cancellable: Cancellable = new Map();
	const sdk = client as unknown as { _oncancel?: (notification: unknown) => unknown };
	const sdkCancel = sdk._oncancel?.bind(client);
	client.setNotificationHandler(CancelledNotificationSchema, async (notification) => {
		const id = notification.params.requestId;
		if (id !== undefined) cancellable.get(id)?.abort(notification.params.reason);
		await sdkCancel?.(notification);
	});
	return cancellable;
}

/** Runs `answer` with a signal that aborts when the server cancels request `id`. */
async function whileCancellable<T>(cancellable: Cancellable, id: string | number, sdkSignal: AbortSignal, answer: (signal: AbortSignal) => Promise<T>): Promise<T> {
	const cancelled = new AbortController();
	cancellable.set(id, cancelled);
	try {
		return await answer(eitherSignal(sdkSignal, cancelled.signal));
	} finally {
		cancellable.delete(id);
	}
}

/** Routes the server's `sampling/createMessage` requests to `answer`. */
function answerSamplingWith(client: Client, cancellable: Cancellable, answer: SamplingAnswerer): void {
	client.setRequestHandler(CreateMessageRequestSchema, (request, extra) =>
		whileCancellable(cancellable, extra.requestId, extra.signal, (signal) => answer(request.params, signal)),
	);
}

/**
 * Routes pi-repl's custom requests (host tools, pi sub-agents' command lines) to their answerers.
 * The SDK has no schema for them, so they arrive at its fallback handler (any other unknown
 * method is refused as before).
 */
function answerCustomRequestsWith(client: Client, cancellable: Cancellable, tools?: HostToolsAnswerer, piAgents?: PiAgentsAnswerer): void {
	if (!tools && !piAgents) return;
	client.fallbackRequestHandler = async (request, extra) => {
		if (tools && request.method === HOST_TOOLS_CALL) {
			return (await whileCancellable(cancellable, extra.requestId, extra.signal, (signal) => tools.call(request.params, signal))) as never;
		}
		if (tools && request.method === HOST_TOOLS_LIST) return (await tools.list()) as never;
		if (piAgents && request.method === PI_AGENTS_COMMAND) return (await piAgents.command(request.params)) as never;
		throw new McpError(ErrorCode.MethodNotFound, "Method not found");
	};
}

/** A signal that aborts when either does (AbortSignal.any needs Node 20.3). */
function eitherSignal(first: AbortSignal | undefined, second: AbortSignal): AbortSignal {
	if (!first) return second;
	const both = new AbortController();
	const forward = (from: AbortSignal) => () => both.abort(from.reason);
	if (first.aborted) both.abort(first.reason);
	else if (second.aborted) both.abort(second.reason);
	else {
		first.addEventListener("abort", forward(first), { once: true });
		second.addEventListener("abort", forward(second), { once: true });
	}
	return both.signal;
}

function isTimeout(error: unknown): boolean {
	return typeof error === "object" && error !== null && (error as { code?: unknown }).code === -32001;
}

function delay(ms: number): Promise<undefined> {
	return new Promise((resolveDelay) => setTimeout(() => resolveDelay(undefined), ms).unref());
}
