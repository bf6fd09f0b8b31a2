import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readLastRunReport, reportDetails } from "../../src/puppet/report.js";

// last_run_report.yaml read for the puppet agent's last_run_report action (the web console's node
// page): Puppet writes it as Ruby-tagged YAML; what matters is each changed or failed resource with
// its events' messages, and the warnings and errors. (test/fleet/puppet-real.test.ts runs the real
// puppet-agent.)

const REPORT = `--- !ruby/object:Puppet::Transaction::Report
host: web1.example.net
time: '2026-03-01T10:00:00.123456789+00:00'
configuration_version: 1772359200
transaction_uuid: 0b1c2d3e-aaaa-bbbb-cccc-0123456789ab
report_format: 12
puppet_version: 8.10.0
status: failed
environment: production
logs:
- level: notice
  message: Applied catalog in 1.23 seconds
  source: Puppet
- level: warning
  message: 'Unknown variable: ::osfamily'
  source: Puppet
- level: err
  message: "change from 'absent' to 'file' failed: Could not set 'file' on ensure: Permission denied"
  source: "/Stage[main]/App/File[/opt/app/app.conf]/ensure"
- level: err
  message: Could not read /proc/1/environ
  source: Facter
resource_statuses:
  File[/etc/motd]:
    title: "/etc/motd"
    file: "/etc/puppet/code/environments/production/modules/motd/manifests/init.pp"
    line: 3
    resource: File[/etc/motd]
    resource_type: File
    failed: false
    changed: true
    out_of_sync: true
    events:
    - !ruby/object:Puppet::Transaction::Event
      audited: false
      property: content
      previous_value: "{md5}0f0e"
      desired_value: "{md5}a1b2"
      message: "content changed '{md5}0f0e' to '{md5}a1b2'"
      name: content_changed
      status: success
  File[/opt/app/app.conf]:
    resource: File[/opt/app/app.conf]
    file: "/etc/puppet/code/environments/production/modules/app/manifests/init.pp"
    line: 12
    failed: true
    changed: false
    events:
    - message: "change from 'absent' to 'file' failed: Could not set 'file' on ensure: Permission denied"
      status: failure
  Package[curl]:
    resource: Package[curl]
    failed: false
    changed: false
    events: []
`;

test("reportDetails: failed then changed resources with their messages, the warnings and errors, Facter's noise left out", async () => {
  const { parse } = await import("yaml");
  const d = reportDetails(parse(REPORT, { logLevel: "silent" }))!;
  assert.equal(d.status, "failed");
  assert.equal(d.environment, "production");
  assert.equal(d.config_version, "1772359200");
  assert.equal(d.time, "2026-03-01T10:00:00.123456789+00:00");
  assert.deepEqual(d.resources, [
    { resource: "File[/opt/app/app.conf]", status: "failed", file: "/etc/puppet/code/environments/production/modules/app/manifests/init.pp", line: 12, messages: ["change from 'absent' to 'file' failed: Could not set 'file' on ensure: Permission denied"] },
    { resource: "File[/etc/motd]", status: "changed", file: "/etc/puppet/code/environments/production/modules/motd/manifests/init.pp", line: 3, messages: ["content changed '{md5}0f0e' to '{md5}a1b2'"] },
  ]);
  assert.equal(d.resources_left_out, 0);
  assert.deepEqual(
    d.logs.map((l) => [l.level, l.source]),
    [
      ["warning", "Puppet"],
      ["err", "/Stage[main]/App/File[/opt/app/app.conf]/ensure"],
    ],
  );
  assert.equal(reportDetails(parse(REPORT, { logLevel: "silent" }), 1)!.resources_left_out, 1, "beyond the limit: counted");
  assert.equal(reportDetails("not a report"), undefined);
});

test("readLastRunReport: from the file; missing, unreadable or too large: nothing", () => {
  const dir = mkdtempSync(join(tmpdir(), "muster-report-"));
  try {
    const f = join(dir, "last_run_report.yaml");
    assert.equal(readLastRunReport(f), undefined);
    writeFileSync(f, REPORT);
    assert.equal(readLastRunReport(f)!.resources.length, 2);
    assert.equal(readLastRunReport(f, 100), undefined, "larger than the cap");
    writeFileSync(f, "- not\n- a report\n");
    assert.equal(readLastRunReport(f), undefined);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
