# frozen_string_literal: true

require 'json'
require 'net/http'
require 'openssl'
require 'uri'
require 'yaml'

# search_nodes: find nodes in muster's registry with muster's filter language, at catalog compile
# time (so on the Puppet master), as in
#
#   $masterdb = search_nodes("customer=${facts['customer']} environment=${facts['environment']} mysql::master")
#
# A String is a -W filter (facts, classes, identities, agents in one string); a Hash takes the
# other flags by name: {'fact' => [...], 'class' => [...], 'identity' => [...], 'agent' => [...],
# 'with' => ..., 'select' => '...', 'collective' => 'muster'}. Returns the matching identities,
# sorted, or with {'full' => true} the full records (identity, facts, classes, agents, collectives,
# last_seen, age_seconds).
#
# Configuration: <confdir>/muster.yaml on the master (the confdir of puppetserver or puppet apply):
#
#   registry_url: http://127.0.0.1:8089     # `muster registry serve` with http: on
#   token_file: /etc/puppet/muster-registry.token   # its http.token_file
#   timeout: 10                             # seconds (optional)
#   ca_file: /path/ca.pem                   # for an https:// registry (optional)
#   source: puppetdb                        # answer from PuppetDB, through the registry (optional;
#                                           # default registry): classes from compiled catalogs
#
# Any failure (no configuration, registry unreachable, token refused, a filter the registry
# rejects) fails the catalog with a Puppet::Error naming the registry URL: a catalog built on a
# guess of which database is the master is worse than no catalog. An empty, filling or stale
# registry is logged as a warning on the master (the answer may be incomplete).
Puppet::Functions.create_function(:search_nodes) do
  dispatch :search_with do
    param 'String[1]', :query
    optional_param 'Hash[String, Any]', :options
    return_type 'Array'
  end

  dispatch :search_by do
    param 'Hash[String, Variant[String, Array[String]]]', :query
    optional_param 'Hash[String, Any]', :options
    return_type 'Array'
  end

  def search_with(query, options = {})
    search([['with', query]], options)
  end

  def search_by(query, options = {})
    unknown = query.keys - query_keys
    raise Puppet::ParseError, "search_nodes: unknown query key #{unknown.join(', ')}; use #{query_keys.join(', ')}" unless unknown.empty?
    raise Puppet::ParseError, 'search_nodes: an empty query; give a filter string, or a Hash with at least one of fact, class, identity, agent, with, select' if query.empty?

    search(query.flat_map { |k, v| Array(v).map { |x| [k, x] } }, options)
  end

  private

  # methods, not constants: puppetserver reloads functions, and a constant would be redefined
  def query_keys
    %w[fact class identity agent with select collective]
  end

  def option_keys
    %w[full config]
  end

  def search(params, options)
    unknown = options.keys - option_keys
    raise Puppet::ParseError, "search_nodes: unknown option #{unknown.join(', ')}; use #{option_keys.join(', ')}" unless unknown.empty?

    cfg = settings(options['config'])
    uri = URI.join(cfg[:url].end_with?('/') ? cfg[:url] : "#{cfg[:url]}/", 'nodes')
    params += [['source', 'puppetdb']] if cfg[:source] == 'puppetdb'
    params += [%w[full true]] if cfg[:source] == 'puppetdb' && options['full'] == true
    uri.query = URI.encode_www_form(params)
    body = fetch(uri, cfg)
    Puppet.warning("search_nodes: #{body['warning']}") if body['warning'].is_a?(String)
    nodes = body['nodes']
    raise Puppet::Error, "search_nodes: the muster registry at #{cfg[:url]} answered without a node list" unless nodes.is_a?(Array)

    options['full'] == true ? nodes : nodes.map { |n| n['identity'] }.sort
  end

  def settings(path)
    file = path || File.join(Puppet[:confdir], 'muster.yaml')
    unless File.exist?(file)
      raise Puppet::Error, "search_nodes: no muster registry configured: #{file} is missing; write registry_url and token_file there (see muster's docs/registry.md)"
    end

    raw = begin
      YAML.safe_load(File.read(file))
    rescue StandardError => e
      raise Puppet::Error, "search_nodes: cannot read #{file}: #{e.message}"
    end
    raise Puppet::Error, "search_nodes: #{file} must be a YAML mapping with registry_url and token_file" unless raw.is_a?(Hash)

    url = raw['registry_url']
    raise Puppet::Error, "search_nodes: #{file}: registry_url must be an http:// or https:// URL, got #{url.inspect}" unless url.is_a?(String) && url =~ %r{\Ahttps?://}

    token = nil
    if raw['token_file']
      begin
        token = File.read(raw['token_file']).strip
      rescue StandardError => e
        raise Puppet::Error, "search_nodes: cannot read the registry token (#{file}: token_file): #{e.message}"
      end
      raise Puppet::Error, "search_nodes: the registry token file #{raw['token_file']} is empty" if token.empty?
    end
    timeout = raw.fetch('timeout', 10)
    raise Puppet::Error, "search_nodes: #{file}: timeout must be a positive number of seconds" unless timeout.is_a?(Numeric) && timeout.positive?

    source = raw.fetch('source', 'registry')
    raise Puppet::Error, "search_nodes: #{file}: source is registry or puppetdb, got #{source.inspect}" unless %w[registry puppetdb].include?(source)

    { url: url, token: token, token_file: raw['token_file'], timeout: timeout, ca_file: raw['ca_file'], file: file, source: source }
  end

  def fetch(uri, cfg)
    http = Net::HTTP.new(uri.host, uri.port)
    http.open_timeout = cfg[:timeout]
    http.read_timeout = cfg[:timeout]
    if uri.scheme == 'https'
      http.use_ssl = true
      http.verify_mode = OpenSSL::SSL::VERIFY_PEER
      http.ca_file = cfg[:ca_file] if cfg[:ca_file]
    end
    req = Net::HTTP::Get.new(uri)
    req['Accept'] = 'application/json'
    req['Authorization'] = "Bearer #{cfg[:token]}" if cfg[:token]
    res = begin
      http.request(req)
    rescue StandardError, Timeout::Error => e
      raise Puppet::Error, "search_nodes: cannot reach the muster registry at #{cfg[:url]}: #{e.message} (is `muster registry serve` running with http on? #{cfg[:file]})"
    end
    body = begin
      JSON.parse(res.body.to_s)
    rescue JSON::ParserError
      nil
    end
    message = body.is_a?(Hash) && body['message'] ? ": #{body['message']}" : ''
    case res.code.to_i
    when 200
      raise Puppet::Error, "search_nodes: the muster registry at #{cfg[:url]} did not answer JSON" unless body.is_a?(Hash)

      body
    when 401
      how = cfg[:token] ? "refused the token in #{cfg[:token_file]}" : "wants a token: set token_file in #{cfg[:file]}"
      raise Puppet::Error, "search_nodes: the muster registry at #{cfg[:url]} #{how} (HTTP 401)#{message}"
    when 400
      raise Puppet::Error, "search_nodes: the muster registry at #{cfg[:url]} rejected the query #{URI.decode_www_form(uri.query).inspect}#{message}"
    else
      raise Puppet::Error, "search_nodes: the muster registry at #{cfg[:url]} answered HTTP #{res.code}#{message}"
    end
  end
end
