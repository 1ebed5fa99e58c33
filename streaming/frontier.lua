-- Advance a pipeline's frontier: the log offsets (per partition) its views reflect.
-- KEYS[1] frontier hash, KEYS[2] frontier batches hash, KEYS[3] progress stream
-- ARGV: pipeline, batch id, then pairs of (partition, entry id) read by this batch.
-- Returns the frontier as JSON, or false when the batch was applied before.
local frontiers, batches, progress = KEYS[1], KEYS[2], KEYS[3]
local pipeline, batch = ARGV[1], tonumber(ARGV[2])

local last = redis.call('HGET', batches, pipeline)
if last and tonumber(last) >= batch then
  return false
end

local function later(a, b)  -- is entry id a after entry id b?
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, bms = tonumber(ams), tonumber(bms)
  if ams ~= bms then return ams > bms end
  return tonumber(aseq) > tonumber(bseq)
end

local current = redis.call('HGET', frontiers, pipeline)
local frontier = current and cjson.decode(current) or {}
for i = 3, #ARGV, 2 do
  local partition, id = ARGV[i], ARGV[i + 1]
  if frontier[partition] == nil or later(id, frontier[partition]) then
    frontier[partition] = id
  end
end
local encoded = cjson.encode(frontier)
redis.call('HSET', frontiers, pipeline, encoded)
redis.call('HSET', batches, pipeline, batch)
redis.call('XADD', progress, 'MAXLEN', '~', 1000, '*',
  'pipeline', pipeline, 'batch', batch, 'frontier', encoded)
return encoded
