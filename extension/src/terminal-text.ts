/**
 * Cell output as a terminal shows it, for the live view: `\r` back to the line's start, `\b` one
 * column back, `ESC[K`/`ESC[2K` erase in the line, `ESC[J` erase below, `ESC[nA`/`B`/`C`/`D`/`G`
 * cursor moves, `ESC[2J` clears everything. pi-repl sends a progress bar as its current state
 * redrawn in place (`LiveDraw` in src/terminal_text.rs), so the view shows the bar once, not one
 * line per update. Colours are dropped; other escape sequences (OSC) are left for `sanitize`.
 */

// biome-ignore lint/suspicious/noControlCharactersInRegex: escape sequences are the point
const CSI = /^\x1b\[([0-9;]*)([A-Za-z])/;

/** `text` rendered: the lines a terminal would show (a text ending in a line break still does). */
export function renderTerminal(text: string): string {
	if (!/[\r\b\x1b]/.test(text)) return text;
	const lines: string[][] = [[]];
	let row = 0;
	let col = 0;
	let i = 0;
	while (i < text.length) {
		const ch = text.charAt(i);
		if (ch === "\n") {
			row += 1;
			col = 0;
			if (row === lines.length) lines.push([]);
			i += 1;
		} else if (ch === "\r") {
			col = 0;
			i += 1;
		} else if (ch === "\b") {
			col = Math.max(0, col - 1);
			i += 1;
		} else if (ch === "\x1b") {
			const match = CSI.exec(text.slice(i, i + 32));
			if (!match) {
				// Not a cursor or erase sequence: kept for `sanitize`, written as characters.
				put(ch);
				i += 1;
				continue;
			}
			const digits = match[1] ?? "";
			const n = digits === "" ? undefined : Number.parseInt(digits, 10);
			const count = Math.max(1, n ?? 1);
			const line = lineAt(row);
			switch (match[2]) {
				case "A":
					row = Math.max(0, row - count);
					break;
				case "B":
					row = Math.min(lines.length - 1, row + count);
					break;
				case "C":
					col += count;
					break;
				case "D":
					col = Math.max(0, col - count);
					break;
				case "G":
					col = count - 1;
					break;
				case "K":
					if ((n ?? 0) === 0) line.length = Math.min(line.length, col);
					else if (n === 1) for (let c = 0; c <= col && c < line.length; c++) line[c] = " ";
					else line.length = 0;
					break;
				case "J":
					if ((n ?? 0) === 0) {
						line.length = Math.min(line.length, col);
						lines.length = row + 1;
					} else {
						lines.length = 0;
						lines.push([]);
						row = 0;
						col = 0;
					}
					break;
				default:
				// Colours and the rest show nothing.
			}
			i += match[0].length;
		} else {
			put(ch);
			i += 1;
		}
	}
	function lineAt(at: number): string[] {
		let line = lines[at];
		if (line === undefined) {
			line = [];
			lines[at] = line;
		}
		return line;
	}
	function put(ch: string): void {
		const line = lineAt(row);
		while (line.length < col) line.push(" ");
		line[col] = ch;
		col += 1;
	}
	return lines.map((line) => line.join("")).join("\n");
}
