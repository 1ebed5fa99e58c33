-- Advance a pipeline's frontier: the log offsets (per partition) its views reflect.
-- KEYS[1] frontier hash, KEYS[2] frontier batches hash, KEYS[3] progress stream
-- ARGV: pipeline, batch id, the views' frontier name, the number n of pipelines, their n names,
-- then pairs of (partition, entry id) read by this batch.
-- Each pipeline is its own query with its own frontier; the views' frontier is, per partition,
-- the oldest of them: every view reflects at least that much of the log. Each advance of the
-- pipeline's frontier, and of the views' frontier, is appended to the progress stream: a
-- subscriber of a view follows the frontier of the pipeline that writes it.
-- Returns the pipeline's frontier as JSON, or false when the batch was applied before.
local frontiers, batches, progress = KEYS[1], KEYS[2], KEYS[3]
local pipeline, batch, combined = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local npipes = tonumber(ARGV[4])

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

local function decode(raw)
  if raw then return cjson.decode(raw) end
  return {}
end

local frontier = decode(redis.call('HGET', frontiers, pipeline))
local before = decode(redis.call('HGET', frontiers, combined))
local advanced = false
for i = 5 + npipes, #ARGV, 2 do
  local partition, id = ARGV[i], ARGV[i + 1]
  if frontier[partition] == nil or later(id, frontier[partition]) then
    frontier[partition] = id
    advanced = true
  end
end
local encoded = cjson.encode(frontier)
redis.call('HSET', batches, pipeline, batch)
redis.call('HSET', frontiers, pipeline, encoded)
if advanced then
  redis.call('XADD', progress, 'MAXLEN', '~', 1000, '*',
    'pipeline', pipeline, 'batch', batch, 'frontier', encoded)
end

-- The views' frontier: per partition, the oldest offset over every pipeline that has one.
local oldest = {}
local first = true
for i = 5, 4 + npipes do
  local other = ARGV[i] == pipeline and frontier or decode(redis.call('HGET', frontiers, ARGV[i]))
  local next_oldest = {}
  for partition, id in pairs(other) do
    if first then
      next_oldest[partition] = id
    elseif oldest[partition] ~= nil then
      next_oldest[partition] = later(id, oldest[partition]) and oldest[partition] or id
    end
  end
  oldest = next_oldest
  first = false
end
local changed = false
for partition, id in pairs(oldest) do
  if before[partition] == nil or later(id, before[partition]) then
    before[partition] = id
    changed = true
  end
end
if changed then
  local views = cjson.encode(before)
  redis.call('HSET', frontiers, combined, views)
  redis.call('XADD', progress, 'MAXLEN', '~', 1000, '*',
    'pipeline', combined, 'batch', batch, 'frontier', views)
end
return encoded
