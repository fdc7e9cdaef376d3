// Benchmark: pi-repl's toolbox `read` and `edit` against pi's own built-in tools, on the same
// files. pi's tools are driven through its SDK exports (createReadTool, createEditTool from
// @mariozechner/pi-coding-agent, as installed by `npm ci`); ours through
// python/bench/toolbox_bench.py (function level, no kernel, like pi's execute()).
//
//   cd extension && node scripts/toolbox-bench.mjs [python] [runs]
//
// Makes a 100 MiB file (1,048,576 lines of 100 bytes) and a 10 MiB one in a temporary
// directory, prints the median seconds of each operation and the ratio pi / ours, then deletes
// the files.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createEditTool, createReadTool } from "@mariozechner/pi-coding-agent";

const python = process.argv[2] ?? "python3";
const runs = Number(process.argv[3] ?? 5);
const here = dirname(fileURLToPath(import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "pi-repl-toolbox-bench-"));

function makeFile(path, lines) {
  const filler = "x".repeat(100 - "line 00000000 ".length - 1);
  const chunk = [];
  let parts = [];
  for (let n = 1; n <= lines; n++) {
    chunk.push(`line ${String(n).padStart(8, "0")} ${filler}\n`);
    if (chunk.length === 65536) {
      parts.push(chunk.join(""));
      chunk.length = 0;
    }
  }
  parts.push(chunk.join(""));
  writeFileSync(path, parts.join(""));
}

async function median(times, action) {
  const seconds = [];
  for (let i = 0; i < times; i++) {
    const started = process.hrtime.bigint();
    await action();
    seconds.push(Number(process.hrtime.bigint() - started) / 1e9);
  }
  seconds.sort((a, b) => a - b);
  return seconds.length % 2
    ? seconds[(seconds.length - 1) / 2]
    : (seconds[seconds.length / 2 - 1] + seconds[seconds.length / 2]) / 2;
}

try {
  const bigLines = 1 << 20;
  const editLines = Math.floor(bigLines / 10);
  const editLine = Math.floor(editLines / 2);
  const big = join(dir, "big.log");
  const small = join(dir, "edit.txt");
  makeFile(big, bigLines);
  makeFile(small, editLines);

  const read = createReadTool(dir);
  const edit = createEditTool(dir);
  const tail = await read.execute("bench", { path: big, offset: bigLines - 99, limit: 100 });
  const text = tail.content[0].text;
  if (!text.includes(`line ${String(bigLines).padStart(8, "0")}`)) {
    throw new Error(`pi's read did not return the last line: ${text.slice(-200)}`);
  }
  const piRead = await median(runs, () =>
    read.execute("bench", { path: big, offset: bigLines - 99, limit: 100 }),
  );
  const marker = `line ${String(editLine).padStart(8, "0")}`;
  let pair = [marker, marker.toUpperCase()];
  const piEdit = await median(runs * 2, async () => {
    await edit.execute("bench", { path: small, edits: [{ oldText: pair[0], newText: pair[1] }] });
    pair = [pair[1], pair[0]];
  });

  const ours = JSON.parse(
    execFileSync(
      python,
      [join(here, "../../python/bench/toolbox_bench.py"), big, String(bigLines), small, String(editLine), String(runs)],
      { encoding: "utf8" },
    ),
  );
  const row = (name, pi, mine) =>
    console.log(
      `${name.padEnd(44)} pi ${(pi * 1000).toFixed(1).padStart(8)} ms   pi-repl ${(mine * 1000).toFixed(1).padStart(8)} ms   pi/pi-repl ${(pi / mine).toFixed(1)}x`,
    );
  console.log(`median of ${runs} runs (edits: ${runs * 2}); node ${process.version}`);
  row("read: last 100 lines of 100 MiB (offset=N-99)", piRead, ours.read_last_100_offset);
  row("read: last 100 lines of 100 MiB (offset=-100)", piRead, ours.read_last_100_negative);
  row("edit: one line in the middle of 10 MiB", piEdit, ours.edit_one_line);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
