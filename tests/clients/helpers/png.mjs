// Reading an image the model received: the size of a base64 PNG, from its IHDR chunk.

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** `{ width, height }` of a base64-encoded PNG; throws if the bytes are not a PNG. */
export function pngSize(base64) {
	const bytes = Buffer.from(base64, "base64");
	if (bytes.length < 24 || !bytes.subarray(0, 8).equals(SIGNATURE) || bytes.toString("latin1", 12, 16) !== "IHDR") {
		throw new Error(`not a PNG (${bytes.length} bytes, starting ${bytes.subarray(0, 16).toString("hex")})`);
	}
	return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}
