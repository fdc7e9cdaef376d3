// Finding pi-repl: PI_REPL_BIN, then PATH, then a build inside the package; else how to install.

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { packageCandidates, resolveBinary } from "../../src/binary.js";
import { removeTempDirs, tempDir } from "../helpers/env.js";

function executable(path: string): string {
	mkdirSync(join(path, ".."), { recursive: true });
	writeFileSync(path, "#!/bin/sh\n");
	chmodSync(path, 0o755);
	return path;
}

describe("binary resolution", () => {
	after(removeTempDirs);

	it("uses PI_REPL_BIN first, even when PATH has one", () => {
		const root = tempDir("bin");
		const explicit = executable(join(root, "custom", "pi-repl-dev"));
		const onPath = executable(join(root, "path", "pi-repl"));
		const found = resolveBinary({ env: { PI_REPL_BIN: explicit, PATH: join(root, "path") }, packageDir: join(root, "pkg") });
		assert.deepEqual(found, { ok: true, path: explicit, source: "PI_REPL_BIN" });
		assert.notEqual(onPath, explicit);
	});

	it("reports a PI_REPL_BIN that is not an executable file instead of searching further", () => {
		const root = tempDir("bin");
		executable(join(root, "path", "pi-repl"));
		const notExecutable = join(root, "plain");
		writeFileSync(notExecutable, "x");
		for (const bad of [join(root, "missing"), notExecutable, root]) {
			const found = resolveBinary({ env: { PI_REPL_BIN: bad, PATH: join(root, "path") }, packageDir: root });
			assert.equal(found.ok, false);
			assert.match(!found.ok ? found.message : "", /PI_REPL_BIN is set to .*not an executable file/);
		}
	});

	it("searches PATH in order", () => {
		const root = tempDir("bin");
		const first = executable(join(root, "a", "pi-repl"));
		executable(join(root, "b", "pi-repl"));
		const found = resolveBinary({ env: { PATH: ["", join(root, "empty"), join(root, "a"), join(root, "b")].join(":") }, packageDir: root });
		assert.deepEqual(found, { ok: true, path: first, source: "PATH" });
	});

	it("falls back to a build inside the package: bin/, then the checkout's release, then debug", () => {
		const root = tempDir("bin");
		const pkg = join(root, "repo", "extension");
		const [bundled, release, debug] = packageCandidates(pkg) as [string, string, string];
		assert.equal(bundled, join(pkg, "bin", "pi-repl"));
		assert.equal(release, join(root, "repo", "target", "release", "pi-repl"));
		assert.equal(debug, join(root, "repo", "target", "debug", "pi-repl"));
		executable(debug);
		assert.deepEqual(resolveBinary({ env: { PATH: "" }, packageDir: pkg }), { ok: true, path: debug, source: "package" });
		executable(release);
		assert.deepEqual(resolveBinary({ env: { PATH: "" }, packageDir: pkg }), { ok: true, path: release, source: "package" });
		executable(bundled);
		assert.deepEqual(resolveBinary({ env: { PATH: "" }, packageDir: pkg }), { ok: true, path: bundled, source: "package" });
	});

	it("says exactly how to install pi-repl when none is found, and where it looked", () => {
		const root = tempDir("bin");
		const found = resolveBinary({ env: { PATH: join(root, "nothing") }, packageDir: join(root, "pkg") });
		assert.equal(found.ok, false);
		if (found.ok) return;
		assert.match(found.message, /pi-repl is not installed/);
		assert.match(found.message, /cargo install --locked --path \./);
		assert.match(found.message, /PI_REPL_BIN/);
		assert.deepEqual(found.searched, ["PATH", ...packageCandidates(join(root, "pkg"))]);
		for (const place of found.searched) assert.ok(found.message.includes(place), place);
	});
});
