// Finding the `pi-repl` binary.
//
// Owns: the search order (PI_REPL_BIN, then the platform package `@pi-repl/<os>-<cpu>` this
// package installs as an optional dependency, then PATH, then the cargo builds of the pi-repl
// source checkout this package sits in) and the message that says exactly how to install pi-repl when
// none is found. Does not own: running it.
//
// Invariants: an explicit PI_REPL_BIN that is not an executable file is an error naming it, never
// silently skipped; the search is re-run on demand, so installing pi-repl mid-session works on
// the next call; the only other package's folder it looks in is its own platform package, found
// by Node's module resolution from this package (so `npm install pi-repl` / `pi install
// npm:pi-repl` needs no second step); the checkout's `target/` is used only when the directory
// above this package is a pi-repl source checkout (its Cargo.toml names the package `pi-repl`).

import { accessSync, constants, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, dirname, join, resolve } from "node:path";

/** The binary's file name. */
export const BINARY_NAME = "pi-repl";

/** Where a binary was found. */
export type BinarySource = "PI_REPL_BIN" | "platform package" | "PATH" | "checkout";

export type BinaryResolution =
	| { ok: true; path: string; source: BinarySource }
	| { ok: false; message: string; searched: string[] };

export interface BinaryLookup {
	/** The environment to read PI_REPL_BIN and PATH from. */
	env: Record<string, string | undefined>;
	/** This package's root directory (the one holding package.json). */
	packageDir: string;
	/** The platform to find a package for (default: this process's `platform` and `arch`). */
	platform?: { os: string; cpu: string };
}

/** The npm package that carries the binary for a platform, e.g. `@pi-repl/linux-x64`. */
export function platformPackageName(platform: { os: string; cpu: string } = { os: process.platform, cpu: process.arch }): string {
	return `@pi-repl/${platform.os}-${platform.cpu}`;
}

/**
 * The binary inside the platform package as Node resolves it from `packageDir` (its
 * `bin/pi-repl`), or undefined when that package is not installed (another platform, a
 * checkout, or `--omit=optional`).
 */
export function platformPackageCandidate(packageDir: string, platform?: { os: string; cpu: string }): string | undefined {
	const name = platformPackageName(platform);
	try {
		const manifest = createRequire(join(packageDir, "package.json")).resolve(`${name}/package.json`);
		return join(dirname(manifest), "bin", BINARY_NAME);
	} catch {
		return undefined;
	}
}

/** True when `dir` is a pi-repl source checkout: its Cargo.toml's `[package]` is named `pi-repl`. */
export function isSourceCheckout(dir: string): boolean {
	let manifest: string;
	try {
		manifest = readFileSync(join(dir, "Cargo.toml"), "utf8");
	} catch {
		return false;
	}
	// The `[package]` table runs until the next table header; its `name` key names the crate.
	const table = /^\[package\][^\S\n]*\n([\s\S]*?)(?=^\[|(?![\s\S]))/m.exec(manifest)?.[1] ?? "";
	return /^name\s*=\s*["']pi-repl["']/m.test(table);
}

/**
 * The cargo builds of the checkout this package lives in (`../target/release`, then
 * `../target/debug`), or none when the package does not sit in a pi-repl source checkout.
 */
export function checkoutCandidates(packageDir: string): string[] {
	const checkout = resolve(packageDir, "..");
	if (!isSourceCheckout(checkout)) return [];
	return [join(checkout, "target", "release", BINARY_NAME), join(checkout, "target", "debug", BINARY_NAME)];
}

/** The message shown (to the model and the human) when no pi-repl binary was found. */
export function installMessage(searched: string[]): string {
	return [
		"pi-repl is not installed: PI_REPL_BIN is unset, no platform package came with this extension and there is no `pi-repl` on PATH.",
		"hint: install it with `pip install pi-repl` (or `uv tool install pi-repl`), or from a pi-repl checkout with `cargo install --locked --path .`; its directory must be on PATH,",
		"      or set PI_REPL_BIN to the binary's path. Its Python environment builds itself on first use (or run `pi-repl setup`).",
		`Searched: ${searched.join(", ")}`,
	].join("\n");
}

function isExecutableFile(path: string): boolean {
	try {
		if (!statSync(path).isFile()) return false;
		accessSync(path, constants.X_OK);
		return true;
	} catch {
		return false;
	}
}

/** Finds the binary: PI_REPL_BIN, the platform package, each PATH entry, then `checkoutCandidates`. */
export function resolveBinary(lookup: BinaryLookup): BinaryResolution {
	const explicit = lookup.env.PI_REPL_BIN;
	if (explicit !== undefined && explicit !== "") {
		if (isExecutableFile(explicit)) return { ok: true, path: explicit, source: "PI_REPL_BIN" };
		return {
			ok: false,
			searched: [explicit],
			message: `PI_REPL_BIN is set to ${explicit}, which is not an executable file.\nhint: point PI_REPL_BIN at the pi-repl binary, or unset it to search PATH.`,
		};
	}
	const searched: string[] = [];
	const packaged = platformPackageCandidate(lookup.packageDir, lookup.platform);
	if (packaged !== undefined) {
		if (isExecutableFile(packaged)) return { ok: true, path: packaged, source: "platform package" };
		searched.push(packaged);
	} else {
		searched.push(platformPackageName(lookup.platform));
	}
	for (const dir of (lookup.env.PATH ?? "").split(delimiter)) {
		if (dir === "") continue;
		const candidate = join(dir, BINARY_NAME);
		if (isExecutableFile(candidate)) return { ok: true, path: candidate, source: "PATH" };
	}
	searched.push("PATH");
	for (const candidate of checkoutCandidates(lookup.packageDir)) {
		if (isExecutableFile(candidate)) return { ok: true, path: candidate, source: "checkout" };
		searched.push(candidate);
	}
	return { ok: false, searched, message: installMessage(searched) };
}
