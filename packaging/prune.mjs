// What of `npm ci --omit=dev` the .deb leaves out: only what runs ships (issue 20). Pure: a path
// relative to node_modules/<package>/ in, a reason out (undefined: keep). build-deb.mjs walks the
// tree and acts; test/packaging/deb.test.ts checks the result with lintian and by running it.

// Directories of a package that no `require`/`import` reaches: test suites and their fixtures,
// examples, benchmarks, prose docs, CI and git hooks. Only at a package's top level or one below
// (fastify/test, zod/src/v4/classic/tests is caught by the .ts rule): runtime code has directories
// named `doc` (yaml) and `types` (ajv, mime), so those names are not on the list.
const DEAD_DIRS = new Set(["test", "tests", "__tests__", "spec", "fixtures", "example", "examples", "benchmark", "benchmarks", "bench", "docs", "integration", "coverage", ".github", ".husky", ".circleci", ".vscode", "scripts"]);

// Files a running program never opens: declarations and sources for TypeScript, source maps, lint
// and editor configs, npm's and git's bookkeeping, shell scripts of the packages' own builds, prose.
const DEAD_FILES = [
  [/\.d\.[cm]?ts$/, "type declarations"],
  [/\.[cm]?ts$/, "TypeScript sources"],
  [/\.map$/, "source maps"],
  [/(^|\/)\.(eslintrc|eslintignore|prettierrc|prettierignore|editorconfig|npmignore|gitignore|gitattributes|travis\.yml|nycrc|taprc|airtap\.yml|jshintrc|zuul\.yml|borp\.yaml|nvmrc|c8rc)(\.[a-z]+)?$/, "lint, editor and CI configs"],
  [/(^|\/)(eslint\.config|tsconfig(\.[a-z]+)?|jsconfig|\.?babel\.config|vitest\.config|jest\.config|tsup\.config|rollup\.config|\.?taprc|typedoc)\.[a-z]+$/, "build and lint configs"],
  [/\.sh$/, "shell scripts of the package's own build"],
  [/\.(md|markdown|html)$|(^|\/)(SECURITY|CHANGES|HISTORY|AUTHORS)(\.txt)?$/i, "prose and docs"],
  [/(^|\/)(Makefile|CODEOWNERS|\.npmrc|\.dir-locals\.el|binding\.gyp)$/, "build files"],
];

// Kept whatever the rules say: the licences (also quoted in /usr/share/doc/muster/copyright).
const KEEP = /(^|\/)(LICEN[CS]E|COPYING|NOTICE)([.-][A-Za-z0-9]+)?$/i;

/**
 * Why `rel` (a path inside one package, `/`-separated, no leading slash) does not ship; undefined
 * when it does. `isDir` for directories.
 */
export function pruneReason(rel, isDir) {
  if (KEEP.test(rel)) return undefined;
  const parts = rel.split("/");
  if (isDir) {
    const name = parts.at(-1);
    if (parts.length <= 2 && DEAD_DIRS.has(name)) return `${name}/: not code that runs`;
    return undefined;
  }
  for (const [re, why] of DEAD_FILES) if (re.test(rel)) return why;
  return undefined;
}

/**
 * The files a package's `bin` names: command-line scripts nobody calls (muster runs the libraries,
 * never their CLIs, and the package puts only /usr/bin/muster on PATH).
 */
export function binFiles(pkgJson) {
  const bin = pkgJson.bin;
  if (!bin) return [];
  const files = typeof bin === "string" ? [bin] : Object.values(bin);
  return files.filter((f) => typeof f === "string").map((f) => f.replace(/^\.\//, ""));
}
