// The model calls (a cell's `llm_query`) in flight, for the live view.
//
// Owns: the list of calls that started and have not ended, in start order, and telling whoever
// watches it (the running execute call's live output, or the footer when no call is running, as
// with a cell that went on in the background) that it changed. Does not own: answering them
// (sampling.ts) or drawing them (render.ts).

import type { ModelCall } from "./sampling.js";

export class ModelCalls {
	private readonly inFlight = new Set<ModelCall>();
	private readonly listeners = new Set<() => void>();

	/** Records a call; the function returned ends it (a second call does nothing). */
	readonly watch = (call: ModelCall): (() => void) => {
		const entry = { ...call };
		this.inFlight.add(entry);
		this.changed();
		return () => {
			if (this.inFlight.delete(entry)) this.changed();
		};
	};

	/** The calls in flight, oldest first. */
	list(): ModelCall[] {
		return [...this.inFlight];
	}

	/** Calls `listener` after every change, until the function returned is called. */
	subscribe(listener: () => void): () => void {
		this.listeners.add(listener);
		return () => this.listeners.delete(listener);
	}

	private changed(): void {
		for (const listener of this.listeners) listener();
	}
}
