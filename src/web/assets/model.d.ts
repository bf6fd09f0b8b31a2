// Types of model.js (plain JS served to the browser as is), for test/web/model.test.ts.
export interface TimelineEntry { stage: string; start: string; end?: string }
export const STATUS_ORDER: Record<string, number>;
export function boardOrder(a: { status: string; identity: string }, b: { status: string; identity: string }): number;
export function matchesFind(node: { identity: string; status: string; stage?: string | null; master?: string | null }, find: string): boolean;
export function statusCounts(nodes: { status: string }[]): Record<"failed" | "in_progress" | "pending" | "done", number>;
export function timelineSegments(timeline: TimelineEntry[], now: number): { stage: string; ms: number; fraction: number; running: boolean }[];
export function formatDuration(seconds: number | null | undefined): string;
export function elapsedSeconds(node: { status: string; started?: string | null; elapsed_s?: number | null }, now: number): number | null | undefined;
export function caretLine(source: string, column: number): string;
export function parseColumns(text: string | null | undefined): string[];
export function countBars<V>(counts: { value: V; count: number }[]): { value: V; count: number; fraction: number }[];
export function visibleRange(scrollTop: number, viewportHeight: number, rowHeight: number, total: number, overscan?: number): { first: number; last: number };
export function cellText(v: unknown): string;
export function parseRoute(hash: string): { view: string; arg: string | undefined; params: Record<string, string> };
