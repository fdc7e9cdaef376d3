// The MCP transport over a `ServerProcess`'s stdin/stdout (newline-delimited JSON-RPC).
//
// Owns: framing messages in and out of one child process, refusing a message over the size cap
// (and saying so), and telling the MCP client when that process is gone. Does not own: the
// process itself (process.ts) — closing the transport stops it — or which call a refused message
// belonged to (client.ts fails the calls in flight).
//
// Why not the SDK's StdioClientTransport: it hides the process's exit code and signal (needed to
// tell the model why pi-repl stopped), replaces the environment with a short allow-list (pi-repl
// needs PI_REPL_HOME, PI_REPL_PYTHON, ...), caps one message at 10 MiB while a result with four
// full-size plots can be larger (pi-repl accepts 64 MiB), and its ReadBuffer re-scans the whole
// buffer on every chunk (quadratic: a 40 MiB result blocked pi's event loop for 9.8 s) and drops
// an oversized message silently, so the call it answered waits until Esc.

import { deserializeMessage, serializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { LineReader } from "./line-framing.js";
import type { ServerProcess } from "./process.js";

/** Largest single message accepted from the server (the server's own limit). */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/** A message from the server went over the cap and was dropped. */
export class MessageTooLargeError extends Error {
	constructor(
		/** How much of it had arrived when it crossed the cap. */
		readonly bytes: number,
		readonly limit: number,
		/** What its first bytes say it was: the answer to request `id`, a `method` (a notification), or unknown. */
		readonly identity: MessageIdentity,
	) {
		super(`pi-repl sent a message larger than ${formatBytes(limit)} (over ${formatBytes(bytes)} had arrived); it was dropped`);
		this.name = "MessageTooLargeError";
	}
}

/** Whose message a refused line was, read from its first bytes. */
export type MessageIdentity = { id: string | number } | { method: string } | undefined;

/**
 * Reads whose message a line is from its first bytes. pi-repl writes `{"jsonrpc":"2.0","id":N,
 * "result":…}` for an answer and `{"jsonrpc":"2.0","method":"…",…}` for a notification: the key
 * that comes first decides. Anything else is unknown.
 */
export function identifyMessage(head: Buffer): MessageIdentity {
	const text = head.toString("utf8");
	const id = /"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")/.exec(text);
	const method = /"method"\s*:\s*"((?:[^"\\]|\\.)*)"/.exec(text);
	if (id && (!method || id.index < method.index)) {
		const raw = id[1] ?? "";
		return { id: raw.startsWith('"') ? (JSON.parse(raw) as string) : Number(raw) };
	}
	if (method) return { method: method[1] ?? "" };
	return undefined;
}

export class ProcessTransport implements Transport {
	onclose?: () => void;
	onerror?: (error: Error) => void;
	onmessage?: (message: JSONRPCMessage) => void;
	/** A message over the cap was dropped (also reported through `onerror`). */
	onoverflow?: (error: MessageTooLargeError) => void;
	/** Sees each outgoing message, synchronously, as `send` is called (before it is written). */
	onsend?: (message: JSONRPCMessage) => void;
	private readonly reader: LineReader;
	private closed = false;

	constructor(
		private readonly server: ServerProcess,
		readonly maxMessageBytes = MAX_MESSAGE_BYTES,
	) {
		this.reader = new LineReader(maxMessageBytes, {
			line: (line) => this.receive(line),
			overflow: (bytes, head) => {
				const error = new MessageTooLargeError(bytes, maxMessageBytes, identifyMessage(head));
				this.onoverflow?.(error);
				this.onerror?.(error);
			},
		});
	}

	async start(): Promise<void> {
		this.server.child.stdout.on("data", (chunk: Buffer) => this.reader.push(chunk));
		void this.server.exited.then(() => this.markClosed());
	}

	async send(message: JSONRPCMessage): Promise<void> {
		this.onsend?.(message);
		const stdin = this.server.child.stdin;
		if (this.closed || this.server.exit || !stdin.writable) throw new Error("pi-repl is not running");
		await new Promise<void>((resolveSend, rejectSend) => {
			stdin.write(serializeMessage(message), (error) => (error ? rejectSend(error) : resolveSend()));
		});
	}

	/** Stops the server process and waits until it is gone. */
	async close(): Promise<void> {
		await this.server.stop();
		this.markClosed();
	}

	private receive(line: Buffer): void {
		let message: JSONRPCMessage;
		try {
			message = deserializeMessage(line.toString("utf8"));
		} catch (error) {
			// A line that is not JSON-RPC (a stray log line): skip it, keep reading.
			this.onerror?.(error as Error);
			return;
		}
		this.onmessage?.(message);
	}

	private markClosed(): void {
		if (this.closed) return;
		this.closed = true;
		this.reader.clear();
		this.onclose?.();
	}
}

function formatBytes(bytes: number): string {
	if (bytes >= 1024 * 1024) return `${Math.round((bytes / (1024 * 1024)) * 10) / 10} MiB`;
	if (bytes >= 1024) return `${Math.round((bytes / 1024) * 10) / 10} KiB`;
	return `${bytes} bytes`;
}
