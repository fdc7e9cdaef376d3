// Newline-delimited framing of a byte stream: chunks in, whole lines out, in linear time.
//
// Owns: cutting the server's stdout into lines (one JSON-RPC message each) and refusing a line
// longer than a cap. Does not own: what a line means (transport.ts parses it).
//
// Invariants: every byte is scanned for a newline once and copied at most once, whatever the
// chunk sizes (the SDK's ReadBuffer re-concatenated and re-scanned the whole buffer on every
// chunk, which made one 40 MiB result block pi's event loop for seconds); a line over the cap is
// reported the moment it crosses the cap, then skipped up to its newline, and the lines after it
// are read normally. Empty lines are ignored; a trailing `\r` is dropped.

/** What a `LineReader` produced: whole lines, and lines refused for their size. */
export interface LineHandlers {
	line(line: Buffer): void;
	/**
	 * A line grew past the cap; `bytes` is how much of it had arrived, `head` its first bytes (up to
	 * `HEAD_BYTES`: enough to tell whose answer it was). Called once per such line.
	 */
	overflow(bytes: number, head: Buffer): void;
}

/** Work done so far, in bytes: lets a test prove the framing is linear without timing it. */
export interface FramingWork {
	/** Bytes examined while looking for newlines. */
	scanned: number;
	/** Bytes copied to join a line that arrived in several chunks. */
	copied: number;
}

/** Bytes of a refused line kept to identify it. */
export const HEAD_BYTES = 256;
const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;

export class LineReader {
	readonly work: FramingWork = { scanned: 0, copied: 0 };
	/** The pieces of the line being received (views into the chunks, not copies). */
	private parts: Buffer[] = [];
	private partBytes = 0;
	/** True while skipping the rest of a line that went over the cap. */
	private skipping = false;

	constructor(
		private readonly maxLineBytes: number,
		private readonly handlers: LineHandlers,
	) {}

	push(chunk: Buffer): void {
		let start = 0;
		while (start < chunk.length) {
			const newline = chunk.indexOf(NEWLINE, start);
			const end = newline === -1 ? chunk.length : newline;
			this.work.scanned += (newline === -1 ? chunk.length : newline + 1) - start;
			if (!this.skipping) this.keep(chunk.subarray(start, end));
			if (newline === -1) return;
			start = newline + 1;
			if (this.skipping) this.skipping = false;
			else this.finishLine();
		}
	}

	/** Drops a partial line (the stream ended). */
	clear(): void {
		this.parts = [];
		this.partBytes = 0;
		this.skipping = false;
	}

	private keep(piece: Buffer): void {
		if (piece.length === 0) return;
		if (this.partBytes + piece.length > this.maxLineBytes) {
			const bytes = this.partBytes + piece.length;
			const head = this.head(piece);
			this.clear();
			this.skipping = true;
			this.handlers.overflow(bytes, head);
			return;
		}
		this.parts.push(piece);
		this.partBytes += piece.length;
	}

	/** The first `HEAD_BYTES` of the line being received, `last` included. */
	private head(last: Buffer): Buffer {
		const pieces: Buffer[] = [];
		let bytes = 0;
		for (const part of [...this.parts, last]) {
			if (bytes >= HEAD_BYTES) break;
			pieces.push(part.subarray(0, HEAD_BYTES - bytes));
			bytes += pieces[pieces.length - 1]?.length ?? 0;
		}
		return Buffer.concat(pieces, bytes);
	}

	private finishLine(): void {
		const parts = this.parts;
		const bytes = this.partBytes;
		this.parts = [];
		this.partBytes = 0;
		if (bytes === 0) return;
		let line: Buffer;
		if (parts.length === 1) line = parts[0] as Buffer;
		else {
			line = Buffer.concat(parts, bytes);
			this.work.copied += bytes;
		}
		if (line[line.length - 1] === CARRIAGE_RETURN) line = line.subarray(0, line.length - 1);
		if (line.length > 0) this.handlers.line(line);
	}
}
