# frozen_string_literal: true

require 'json'

# The fact `muster`: what this node's muster server hosts once in production, as it wrote it at
# its start ({agents => {puppet => true, ...}, collectives => {muster => true}}: maps, so that in
# PuppetDB a name is a path, facts.muster.agents.puppet), so that PuppetDB knows it and muster's
# `--dm puppetdb` can answer agent (-A) and collective (-T) filters (muster's docs/puppetdb.md).
# Pluginsync brings it to every node of an environment with this module.
#
# The file is <MUSTER_CONFIG_DIR>/muster-fact.json of the muster server: /var/lib/muster/server on
# a node installed from muster's package; MUSTER_FACT_FILE names another. No file, or one that does
# not hold those maps: no fact (the node is then in no collective as far as PuppetDB knows).
Facter.add(:muster) do
  setcode do
    path = ENV['MUSTER_FACT_FILE'] || '/var/lib/muster/server/muster-fact.json'
    begin
      data = JSON.parse(File.read(path))
      maps = %w[agents collectives].to_h { |k| [k, data[k]] }
      maps.values.all? { |v| v.is_a?(Hash) && v.all? { |name, present| name.is_a?(String) && present == true } } ? maps : nil
    rescue StandardError
      nil
    end
  end
end
