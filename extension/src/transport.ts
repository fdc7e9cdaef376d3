// The MCP transport over a `ServerProcess`'s stdin/stdout (newline-delimited JSON-RPC).
//
// Owns: framing messages in and out of one child process, and telling the MCP client when that
// process is gone. Does not own: the process itself (process.ts) — closing the transport stops it.
//
// Why not the SDK's StdioClientTransport: it hides the process's exit code and signal (needed to
// tell the model why pi-repl stopped), replaces the environment with a short allow-list (pi-repl
// needs PI_REPL_HOME, PI_REPL_PYTHON, ...), and caps one message at 10 MiB while a result with
// four full-size plots can be larger (pi-repl accepts 64 MiB).

import { ReadBuffer, serializeMessage } from "@modelcontextprotocol/sdk/shared/stdio.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import type { ServerProcess } from "./process.js";

/** Largest single message accepted from the server (the server's own limit). */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

export class ProcessTransport implements Transport {
	onclose?: () => void;
	onerror?: (error: Error) => void;
	onmessage?: (message: JSONRPCMessage) => void;
	private readonly buffer = new ReadBuffer({ maxBufferSize: MAX_MESSAGE_BYTES });
	private closed = false;

	constructor(private readonly server: ServerProcess) {}

	async start(): Promise<void> {
		this.server.child.stdout.on("data", (chunk: Buffer) => {
			try {
				this.buffer.append(chunk);
			} catch (error) {
				this.onerror?.(error as Error);
				return;
			}
			for (;;) {
				let message: JSONRPCMessage | null;
				try {
					message = this.buffer.readMessage();
				} catch (error) {
					// A line that is not JSON-RPC (a stray log line): skip it, keep reading.
					this.onerror?.(error as Error);
					continue;
				}
				if (message === null) break;
				this.onmessage?.(message);
			}
		});
		void this.server.exited.then(() => this.markClosed());
	}

	async send(message: JSONRPCMessage): Promise<void> {
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

	private markClosed(): void {
		if (this.closed) return;
		this.closed = true;
		this.buffer.clear();
		this.onclose?.();
	}
}
