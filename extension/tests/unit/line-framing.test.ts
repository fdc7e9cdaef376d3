// The extension's own line framing: whole lines from any chunking, linear work, and a line over
// the cap reported at once and skipped (issue 9: a 40 MiB result blocked pi for 9.8 s in the SDK's
// framing, and an oversized message was dropped without failing its call).

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { HEAD_BYTES, LineReader } from "../../src/line-framing.js";
import { identifyMessage } from "../../src/transport.js";

function reader(maxLineBytes: number) {
	const lines: string[] = [];
	const overflows: number[] = [];
	const r = new LineReader(maxLineBytes, { line: (l) => lines.push(l.toString("utf8")), overflow: (b) => overflows.push(b) });
	return { r, lines, overflows };
}

/** `text` cut into chunks of `size` bytes. */
function chunks(text: string | Buffer, size: number): Buffer[] {
	const bytes = typeof text === "string" ? Buffer.from(text, "utf8") : text;
	const out: Buffer[] = [];
	for (let i = 0; i < bytes.length; i += size) out.push(bytes.subarray(i, i + size));
	return out;
}

describe("line framing", () => {
	it("yields the same lines whatever the chunk size, multi-byte characters split across chunks included", () => {
		const text = '{"a":1}\n{"b":"é界🙂"}\r\n\n{"c":3}\n{"partial"';
		for (const size of [1, 2, 3, 5, 7, 64, 1024]) {
			const { r, lines, overflows } = reader(1024);
			for (const chunk of chunks(text, size)) r.push(chunk);
			assert.deepEqual(lines, ['{"a":1}', '{"b":"é界🙂"}', '{"c":3}'], `chunk size ${size}`);
			assert.deepEqual(overflows, []);
		}
	});

	it("does linear work: each byte scanned once and copied at most once, for one big line and for many small ones", () => {
		const big = Buffer.alloc(8 * 1024 * 1024, 0x61);
		const { r, lines } = reader(64 * 1024 * 1024);
		for (const chunk of chunks(big, 64 * 1024)) r.push(chunk);
		r.push(Buffer.from("\n"));
		assert.equal(lines.length, 1);
		assert.equal(lines[0]?.length, big.length);
		assert.equal(r.work.scanned, big.length + 1, "every byte scanned exactly once (the SDK's buffer re-scanned it per chunk)");
		assert.ok(r.work.copied <= big.length, `copied ${r.work.copied} bytes for a ${big.length}-byte line`);

		const many = `${'{"jsonrpc":"2.0","method":"notifications/progress"}\n'.repeat(20_000)}`;
		const small = reader(1024);
		for (const chunk of chunks(many, 4096)) small.r.push(chunk);
		assert.equal(small.lines.length, 20_000);
		assert.equal(small.r.work.scanned, Buffer.byteLength(many));
		assert.ok(small.r.work.copied <= Buffer.byteLength(many));
	});

	it("reports a line over the cap as soon as it crosses the cap, once, then reads the next line", () => {
		const { r, lines, overflows } = reader(100);
		r.push(Buffer.from('{"ok":1}\n'));
		for (let i = 0; i < 5; i++) r.push(Buffer.alloc(60, 0x78)); // 300 bytes of one line, no newline yet
		assert.deepEqual(overflows, [120], "reported when it crossed 100 bytes, before its end arrived");
		r.push(Buffer.from('xxxx\n{"next":2}\n'));
		assert.deepEqual(lines, ['{"ok":1}', '{"next":2}']);
		assert.deepEqual(overflows, [120], "reported once");
	});

	it("hands over the first bytes of a refused line, however it was chunked, to tell whose it was", () => {
		const message = `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"${"z".repeat(2000)}"}]}}\n`;
		for (const size of [1, 3, 100, 4096]) {
			const heads: string[] = [];
			const r = new LineReader(1000, { line: () => undefined, overflow: (_b, head) => heads.push(head.toString("utf8")) });
			for (const chunk of chunks(message, size)) r.push(chunk);
			assert.deepEqual(heads, [message.slice(0, HEAD_BYTES)], `chunk size ${size}`);
		}
	});

	it("a line of exactly the cap is accepted; one byte more is not", () => {
		const { r, lines, overflows } = reader(10);
		r.push(Buffer.from("0123456789\n01234567890\nok\n"));
		assert.deepEqual(lines, ["0123456789", "ok"]);
		assert.deepEqual(overflows, [11]);
	});
});

describe("whose refused message it was", () => {
	it("reads an answer's id or a notification's method from the first bytes, whichever key comes first", () => {
		const head = (text: string) => Buffer.from(text);
		assert.deepEqual(identifyMessage(head('{"jsonrpc":"2.0","id":12,"result":{"content":[{"type":"text","text":"zzz')), { id: 12 });
		assert.deepEqual(identifyMessage(head('{"jsonrpc":"2.0","id":"a\\"b","result":{')), { id: 'a"b' });
		assert.deepEqual(
			identifyMessage(head('{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3,"id":4,"message":"zz')),
			{ method: "notifications/progress" },
		);
		assert.equal(identifyMessage(head('{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"zzzz')), undefined);
		assert.equal(identifyMessage(head("not json at all")), undefined);
	});
});
