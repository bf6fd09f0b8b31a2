import type { AgentDDL } from "../../ddl/types.js";

// The puppetca agent runs on a Puppet master and manages its CA. sign() signs only a CSR whose
// fingerprint is the one its node reported and that asks for no extra privileges.

const CERTNAME = "^[A-Za-z0-9._-]+$";
const FINGERPRINT = "^(?:(?:SHA256|sha256)[: ]?)?(?:[0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$|^[0-9A-Fa-f]{64}$";

const certOutputs = {
  certname: { description: "The certificate's name", display_as: "Certname", type: "string" },
  state: { description: "requested, signed, revoked, or unknown when the CA knows nothing of it", display_as: "State", type: "string" },
  fingerprint: { description: "SHA-256 fingerprint (AA:BB:...), or null", display_as: "Fingerprint", type: "string" },
  dns_alt_names: { description: "DNS alternative names", display_as: "DNS Alt Names", type: "array", default: [] },
  subject_alt_names: { description: "All alternative names (DNS:..., IP:...)", display_as: "Alt Names", type: "array", default: [] },
  extensions: { description: "Authorization extensions (pp_cli_auth, ...)", display_as: "Auth Extensions", type: "hash", default: {} },
  not_after: { description: "Expiry of a signed certificate, or null", display_as: "Not After", type: "string" },
} as const;

export const puppetcaDDL = {
  metadata: {
    name: "puppetca",
    description: "Lists, signs (after checking the CSR), revokes, cleans and inspects certificates of the Puppet CA on this master, and deactivates nodes in its PuppetDB",
    author: "muster",
    license: "Apache-2.0",
    version: "0.1.0",
    timeout: 60,
  },
  actions: {
    list: {
      description: "Pending requests, signed and revoked certificates",
      readonly: true,
      display: "always",
      input: {},
      output: {
        requests: { description: "Pending CSRs: [{name, fingerprint, dns_alt_names, subject_alt_names, extensions}]", display_as: "Requests", type: "array", default: [] },
        signed: { description: "Signed certificates, same shape plus not_after", display_as: "Signed", type: "array", default: [] },
        revoked: { description: "Revoked certificates", display_as: "Revoked", type: "array", default: [] },
      },
    },
    sign: {
      description:
        "Sign a pending CSR if its SHA-256 fingerprint is the expected one, its subject is the certname, and it requests no authorization extension (pp_cli_auth, ...) and no non-DNS alternative name",
      display: "always",
      input: {
        certname: { prompt: "Certname", description: "The node whose CSR to sign", type: "string", validation: CERTNAME, maxlength: 255, optional: false },
        fingerprint: { prompt: "Fingerprint", description: "SHA-256 fingerprint of the CSR as the node reported it (AA:BB:... or 64 hex digits)", type: "string", validation: FINGERPRINT, maxlength: 110, optional: false },
        node_key: { prompt: "Node key", description: "The node key pinned for the node (base64 ed25519): the CSR must name it in its node-key extension", type: "string", validation: "^[A-Za-z0-9+/]{43}=$", maxlength: 44, optional: true },
      },
      output: {
        ...certOutputs,
        reason: { description: "On refusal (Aborted): no_request, already_signed, revoked, fingerprint_mismatch, name_mismatch, authorization_extension, alt_name, key_mismatch, node_key_mismatch, ca_rejected", display_as: "Refusal", type: "string" },
      },
    },
    clean: {
      description: "Revoke and delete the certificate and any pending request of a certname (a name the CA does not know is fine)",
      display: "failed",
      input: {
        certname: { prompt: "Certname", description: "The certificate to clean", type: "string", validation: CERTNAME, maxlength: 255, optional: false },
      },
      output: {
        certname: { description: "The certname", display_as: "Certname", type: "string" },
        cleaned: { description: "Whether there was anything to clean", display_as: "Cleaned", type: "boolean" },
        revoked: { description: "Whether a signed certificate was revoked (its serial is on the CA's CRL)", display_as: "Revoked", type: "boolean" },
        previous_state: { description: "requested, signed or revoked before cleaning, or null", display_as: "Was", type: "string" },
      },
    },
    revoke: {
      description: "Revoke a signed certificate and keep it listed as revoked (an unknown name, a revoked certificate or a pending request is fine: nothing to revoke)",
      display: "failed",
      input: {
        certname: { prompt: "Certname", description: "The certificate to revoke", type: "string", validation: CERTNAME, maxlength: 255, optional: false },
      },
      output: {
        certname: { description: "The certname", display_as: "Certname", type: "string" },
        revoked: { description: "Whether a signed certificate was revoked by this request", display_as: "Revoked", type: "boolean" },
        previous_state: { description: "requested, signed or revoked before, or null when the CA knows nothing of it", display_as: "Was", type: "string" },
        serial: { description: "The certificate's serial number, or null", display_as: "Serial", type: "integer" },
      },
    },
    deactivate: {
      description:
        "Deactivate a node in the PuppetDB this master sends its data to (its puppetdb.conf), as `puppet node deactivate` does: PuppetDB's deactivate node command, with the master's certificate, confirmed by reading the node back",
      display: "failed",
      input: {
        certname: { prompt: "Certname", description: "The node to deactivate", type: "string", validation: CERTNAME, maxlength: 255, optional: false },
      },
      output: {
        certname: { description: "The certname", display_as: "Certname", type: "string" },
        puppetdb: { description: "The PuppetDB asked (its URL), or null when this master sends to none", display_as: "PuppetDB", type: "string" },
        deactivated: { description: "Whether this request deactivated the node (false: it was unknown or inactive already)", display_as: "Deactivated", type: "boolean" },
        previous_state: { description: "active, deactivated, expired, or unknown when PuppetDB knows nothing of it; null without PuppetDB", display_as: "Was", type: "string" },
      },
    },
    status: {
      description: "State of one certificate or request",
      readonly: true,
      display: "always",
      input: {
        certname: { prompt: "Certname", description: "The certificate to look up", type: "string", validation: CERTNAME, maxlength: 255, optional: false },
      },
      output: certOutputs,
    },
  },
} as const satisfies AgentDDL;

export type PuppetcaDDL = typeof puppetcaDDL;
