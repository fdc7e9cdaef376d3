// Runs `node --test` over every compiled test file under the given directories.
//
// Why a script: `node --test <dir>` runs a directory's tests on Node 20, but Node 21 and later
// read each argument as a file or glob pattern, so a bare directory matches nothing and the run
// fails. Listing the files here and passing them explicitly works on every Node version.

import { spawnSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";

function testFiles(dir) {
	const found = [];
	for (const entry of readdirSync(dir).sort()) {
		const path = join(dir, entry);
		if (statSync(path).isDirectory()) found.push(...testFiles(path));
		else if (entry.endsWith(".test.js")) found.push(path);
	}
	return found;
}

const dirs = process.argv.slice(2);
if (dirs.length === 0) {
	console.error("usage: node scripts/run-tests.mjs DIR...");
	process.exit(2);
}
const files = dirs.flatMap(testFiles);
if (files.length === 0) {
	console.error(`error: no *.test.js files under ${dirs.join(", ")} (did tsc run?)`);
	process.exit(1);
}
const run = spawnSync(process.execPath, ["--test", ...files], { stdio: "inherit" });
process.exit(run.status ?? 1);
