"""The store's Lua scripts: counts that must change atomically on a Redis shared by replicas.

Trust's imagined x real pairs and the learned budget's real results are bumped, windowed and
given their TTL in one script call each, so two replicas recording at once never lose a count
or halve a row twice. One hash per tenant, so a script touches one Redis Cluster slot.
"""

from __future__ import annotations

# What both scripts share: a row's fields, halving a row, and counting the tenant's tool rows.
_ROWS = """
local function fields_of(name, cells)
  local fields = {}
  for i = 1, #cells do fields[i] = name .. ":" .. cells[i] end
  return fields
end
local function halve(fields, values)
  for i = 1, #fields do
    redis.call("HSET", KEYS[1], fields[i], math.floor((tonumber(values[i]) or 0) / 2))
  end
end
local function tool_rows(pattern)  -- distinct tools with a row, the pooled "*" aside
  local seen, count = {}, 0
  for _, field in ipairs(redis.call("HKEYS", KEYS[1])) do
    local name = string.match(field, pattern)
    if name and name ~= "*" and not seen[name] then
      seen[name] = true
      count = count + 1
    end
  end
  return count
end
"""

# One imagined x real pair, atomically: bump the tool's cell (when the tool is already known or
# the tenant has room for one more) and the pooled "*" cell, halve a tool's counts once their
# total passes the window (recent evidence dominates), refresh the TTL.
# KEYS[1] trust hash; ARGV: tool, cell, window, ttl_s, max_tools.
TRUST_SCRIPT = (
    _ROWS
    + """
local key, tool, cell = KEYS[1], ARGV[1], ARGV[2]
local window, ttl, max_tools = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local cells = {"ee", "eo", "oe", "oo", "we", "wo"}
local function bump(name)
  redis.call("HINCRBY", key, name .. ":" .. cell, 1)
  local fields = fields_of(name, cells)
  local values = redis.call("HMGET", key, unpack(fields))
  local total = 0
  for i = 1, #cells do total = total + (tonumber(values[i]) or 0) end
  if total > window then halve(fields, values) end
end
local known = false
for _, value in ipairs(redis.call("HMGET", key, unpack(fields_of(tool, cells)))) do
  if value then known = true end
end
if not known then  -- a new tool: admitted while the tenant has fewer than max_tools
  known = tool_rows("^(.*):[eow][eo]$") < max_tools
end
if known then bump(tool) end
bump("*")
redis.call("EXPIRE", key, ttl)
return 1
"""
)


# One real result of a tool's anchor for the learned budget (rehearsal.auto), as TRUST_SCRIPT:
# bump the given cells of each named row (the tool, its class's pool; each when known or there
# is room) and of "*", halve a row once its samples (n + r) pass the window, refresh the TTL.
# KEYS[1] budget hash; ARGV: window, ttl_s, max_tools, number of rows, row..., cell...
BUDGET_SCRIPT = (
    _ROWS
    + """
local key = KEYS[1]
local window, ttl, max_tools = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local rows = tonumber(ARGV[4])
local cells = {"n", "f", "r", "rs", "u", "m"}
local function bump(name)
  for i = 5 + rows, #ARGV do redis.call("HINCRBY", key, name .. ":" .. ARGV[i], 1) end
  local fields = fields_of(name, cells)
  local values = redis.call("HMGET", key, unpack(fields))
  if (tonumber(values[1]) or 0) + (tonumber(values[3]) or 0) > window then
    halve(fields, values)
  end
end
for row = 5, 4 + rows do
  local tool = ARGV[row]
  local known = redis.call("HEXISTS", key, tool .. ":n") == 1
    or redis.call("HEXISTS", key, tool .. ":r") == 1
  if not known then known = tool_rows("^(.*):[nfrum]s?$") < max_tools end
  if known then bump(tool) end
end
bump("*")
redis.call("EXPIRE", key, ttl)
return 1
"""
)
