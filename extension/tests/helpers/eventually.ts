// Waiting for what a test is about, never for a length of time: the one "eventually" helper of
// the extension's tests (issue 24).
//
// Owns: looking at a check until it holds (a file written, an event seen, a process gone) and
// failing with what never happened once a generous limit passes. The limit only turns a hang
// into a failure; nothing is asserted about how soon the check held (timings are benchmarks).
// Does not own: sleeps that are the workload (a cell that sleeps to stay running, a model that
// "thinks"), which say so where they are.

/** How long a check rests between looks: short beside anything a test waits for. */
const LOOK_AGAIN_MS = 20;

/** A check's answer: not yet (`undefined`, `null`, `false`), or what it found. */
type Found<T> = T | undefined | null | false;

/** Looks at `check` until it holds and returns what it found; `undefined` once `ms` passed. */
export async function poll<T>(check: () => Found<T>, ms: number): Promise<T | undefined> {
	const deadline = Date.now() + ms;
	for (;;) {
		const found = check();
		if (found !== undefined && found !== null && found !== false) return found;
		if (Date.now() > deadline) return undefined;
		await new Promise((r) => setTimeout(r, LOOK_AGAIN_MS));
	}
}

/** Waits until `check` holds and returns what it found; throws naming `what` after `ms`. */
export async function eventually<T>(check: () => Found<T>, ms: number, what: string): Promise<T> {
	const found = await poll(check, ms);
	if (found === undefined) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
	return found;
}

/** `eventually` for a check that only holds or not. */
export async function waitUntil(check: () => boolean, ms: number, what: string): Promise<void> {
	await eventually(check, ms, what);
}
