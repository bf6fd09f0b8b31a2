import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// Where the benches find their siblings (dist/bench), the repository and the CLI they measure.
export const benchDir = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(benchDir, "..", "..");
export const cliPath = join(repoRoot, "dist", "src", "cli", "main.cjs"); // package.json's bin: what users run
