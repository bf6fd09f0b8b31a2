// Defaults of bootstrap credentials, apart from the code that uses them: `muster broker --help`
// shows them without loading the broker spec's schema (zod) or the PKI.

/** O= of a bootstrap credential's subject (the broker spec's bootstrap_org). */
export const BOOTSTRAP_ORG = "muster";
/** Validity of a bootstrap credential, days: long enough for an image to boot, short enough to expire unused. */
export const BOOTSTRAP_DAYS = 30;
