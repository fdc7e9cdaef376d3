// Finding pi-repl: PI_REPL_BIN, then the platform package, then PATH, then the source checkout's
// builds; else how to install.

import assert from "node:assert/strict";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { checkoutCandidates, isSourceCheckout, platformPackageName, resolveBinary } from "../../src/binary.js";
import { REPO_DIR, removeTempDirs, tempDir } from "../helpers/env.js";

function executable(path: string): string {
	mkdirSync(join(path, ".."), { recursive: true });
	writeFileSync(path, "#!/bin/sh\n");
	chmodSync(path, 0o755);
	return path;
}

function cargoToml(dir: string, name: string, extra = ""): void {
	mkdirSync(dir, { recursive: true });
	writeFileSync(join(dir, "Cargo.toml"), `[package]\nname = "${name}"\nversion = "0.1.0"\n\n${extra}`);
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

	it("in a pi-repl source checkout, falls back to its target/release, then target/debug", () => {
		const root = tempDir("bin");
		const checkout = join(root, "repo");
		const pkg = join(checkout, "extension");
		cargoToml(checkout, "pi-repl");
		const [release, debug] = checkoutCandidates(pkg) as [string, string];
		assert.deepEqual([release, debug], [join(checkout, "target", "release", "pi-repl"), join(checkout, "target", "debug", "pi-repl")]);
		const none = resolveBinary({ env: { PATH: "" }, packageDir: pkg });
		assert.deepEqual(!none.ok && none.searched, [platformPackageName(), "PATH", release, debug]);
		executable(debug);
		assert.deepEqual(resolveBinary({ env: { PATH: "" }, packageDir: pkg }), { ok: true, path: debug, source: "checkout" });
		executable(release);
		assert.deepEqual(resolveBinary({ env: { PATH: "" }, packageDir: pkg }), { ok: true, path: release, source: "checkout" });
		const onPath = executable(join(root, "path", "pi-repl"));
		assert.deepEqual(resolveBinary({ env: { PATH: join(root, "path") }, packageDir: pkg }), { ok: true, path: onPath, source: "PATH" });
	});

	it("an installed package never reaches into node_modules or another package's folder", () => {
		const root = tempDir("bin");
		// npm's layout: the package is node_modules/pi-repl; a `target/` beside it belongs to no one we know.
		const modules = join(root, "project", "node_modules");
		const pkg = join(modules, "pi-repl");
		mkdirSync(pkg, { recursive: true });
		executable(join(modules, "target", "release", "pi-repl"));
		executable(join(modules, "target", "debug", "pi-repl"));
		executable(join(pkg, "bin", "pi-repl"));
		assert.deepEqual(checkoutCandidates(pkg), []);
		const found = resolveBinary({ env: { PATH: "" }, packageDir: pkg });
		assert.equal(found.ok, false);
		assert.deepEqual(!found.ok && found.searched, [platformPackageName(), "PATH"]);
	});

	it("an installed package finds the binary in its platform package, after PI_REPL_BIN and before PATH", () => {
		const root = tempDir("bin");
		// npm's layout after `npm install pi-repl`: the optional dependency is a sibling scope folder.
		const modules = join(root, "project", "node_modules");
		const pkg = join(modules, "pi-repl");
		mkdirSync(pkg, { recursive: true });
		writeFileSync(join(pkg, "package.json"), '{"name":"pi-repl"}');
		const platform = { os: "linux", cpu: "x64" };
		const platformDir = join(modules, "@pi-repl", "linux-x64");
		mkdirSync(platformDir, { recursive: true });
		writeFileSync(join(platformDir, "package.json"), '{"name":"@pi-repl/linux-x64"}');
		const packaged = join(platformDir, "bin", "pi-repl");
		// Installed but not executable (an unpacker that dropped the mode): named, then PATH is tried.
		mkdirSync(join(platformDir, "bin"));
		writeFileSync(packaged, "");
		const onPath = executable(join(root, "path", "pi-repl"));
		const fallback = resolveBinary({ env: { PATH: join(root, "path") }, packageDir: pkg, platform });
		assert.deepEqual(fallback, { ok: true, path: onPath, source: "PATH" });
		executable(packaged);
		assert.deepEqual(resolveBinary({ env: { PATH: join(root, "path") }, packageDir: pkg, platform }), {
			ok: true,
			path: packaged,
			source: "platform package",
		});
		const explicit = executable(join(root, "custom", "pi-repl"));
		assert.deepEqual(resolveBinary({ env: { PI_REPL_BIN: explicit, PATH: "" }, packageDir: pkg, platform }), {
			ok: true,
			path: explicit,
			source: "PI_REPL_BIN",
		});
		// Another platform's package is not this one's.
		const other = resolveBinary({ env: { PATH: "" }, packageDir: pkg, platform: { os: "darwin", cpu: "arm64" } });
		assert.deepEqual(!other.ok && other.searched, ["@pi-repl/darwin-arm64", "PATH"]);
	});

	it("a parent directory whose Cargo.toml names another crate is not a checkout", () => {
		const root = tempDir("bin");
		const other = join(root, "other-project");
		cargoToml(other, "not-pi-repl", '[dependencies]\nname = "pi-repl"\n');
		executable(join(other, "target", "debug", "pi-repl"));
		assert.equal(isSourceCheckout(other), false);
		assert.deepEqual(checkoutCandidates(join(other, "extension")), []);
		assert.equal(resolveBinary({ env: { PATH: "" }, packageDir: join(other, "extension") }).ok, false);
	});

	it("recognises this repository as a pi-repl source checkout", () => {
		assert.equal(isSourceCheckout(REPO_DIR), true);
	});

	it("says exactly how to install pi-repl when none is found, and where it looked", () => {
		const root = tempDir("bin");
		const found = resolveBinary({ env: { PATH: join(root, "nothing") }, packageDir: join(root, "pkg") });
		assert.equal(found.ok, false);
		if (found.ok) return;
		assert.match(found.message, /pi-repl is not installed/);
		assert.match(found.message, /cargo install --locked --path \./);
		assert.match(found.message, /pip install pi-repl/);
		assert.match(found.message, /PI_REPL_BIN/);
		assert.deepEqual(found.searched, [platformPackageName(), "PATH"]);
		for (const place of found.searched) assert.ok(found.message.includes(place), place);
	});
});
