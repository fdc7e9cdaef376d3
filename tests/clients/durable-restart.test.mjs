// Issue 21: a durable session keeps the last answered cell across the ordinary end of a real
// client's run. `claude -p` stops pi-repl right after the last answer (SIGINT, SIGTERM 100 ms
// later, SIGKILL 400 ms after that), `codex exec` too (SIGTERM, SIGKILL about 9 ms later); before
// issue 21 the next start lost that cell in 2 of 5 Claude Code and 2 of 3 Codex restarts.
//
// Each client runs eleven times in one project and one PI_REPL_HOME with `--session restart`:
// run k binds `z<k>` in its only call and prints `z<k-1>`, which the run before it bound in its
// last (only) answered call. Ten restarts, each of which must find the last answer's state.
// Before issue 21 (checked with the build before it): a save of 40 MB did not survive the stop.

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { textOf } from "./helpers/cells.mjs";
import { runClaude } from "./helpers/claude.mjs";
import { runCodex } from "./helpers/codex.mjs";
import { installedVersion, removeTempDirs, tempDir } from "./helpers/env.mjs";

const RESTARTS = 10;

/** The only call of run `k`: its value carries 40 MB, so its save takes a while (as real work's
 * does), longer than the client waits before it stops the server. */
function cell(k) {
	const bind = `import os\nz${k} = (${k * 7}, bytearray(os.urandom(40_000_000)))`;
	return k === 0 ? bind : `${bind}\nprint('previous', z${k - 1}[0])\ndel z${k - 1}`;
}

async function restarts(run) {
	const root = tempDir("durable");
	const shared = { project: join(root, "project"), replHome: join(root, "repl-home") };
	mkdirSync(shared.project, { recursive: true });
	const seen = [];
	for (let k = 0; k <= RESTARTS; k++) {
		const result = await run({ calls: [{ code: cell(k) }], serverArgs: ["--session", "restart"], shared });
		assert.equal(result.timedOut, false, `run ${k} did not finish; stderr:\n${result.stderr}`);
		const answered = result.records[1]?.lastToolResult;
		assert.ok(answered, `run ${k}: no tool result reached the model; stderr:\n${result.stderr}`);
		seen.push(textOf(answered));
	}
	return seen;
}

function assertEveryRestartKeptTheLastAnswer(seen) {
	const kept = seen.slice(1).filter((text, i) => text.includes(`previous ${i * 7}`) && !text.includes("so gone"));
	assert.equal(kept.length, RESTARTS, `restarts that kept the last answer: ${kept.length} of ${RESTARTS}:\n${seen.join("\n---\n")}`);
}

describe(`a durable session across ${RESTARTS} restarts`, () => {
	after(removeTempDirs);

	test(`Claude Code ${installedVersion("@anthropic-ai/claude-code")}: every restart keeps the last answered cell`, async () => {
		assertEveryRestartKeptTheLastAnswer(await restarts(runClaude));
	});

	test(`Codex ${installedVersion("@openai/codex")}: every restart keeps the last answered cell`, async () => {
		assertEveryRestartKeptTheLastAnswer(await restarts(runCodex));
	});
});
