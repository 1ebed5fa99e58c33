-- Advance a pipeline's frontier: the log offsets (per partition) its views reflect.
-- KEYS[1] frontier hash, KEYS[2] frontier batches hash, KEYS[3] progress stream,
-- KEYS[4] active namespaces hash, KEYS[5] this pipeline version's history stream,
-- KEYS[6] frontier lag hash, left out when the log's positions hold no time (Kafka): all of
-- them control keys (lv:{m}:*), in one slot of a cluster.
-- ARGV: pipeline (with its namespace), batch id, the views' frontier name, row changes in the
-- batch, the number n of pipelines, their n base names, then triples of (partition, entry id
-- read by this batch, the partition's newest entry id as the sink read it just before, or '').
-- Each pipeline is its own query with its own frontier; the views' frontier is, per partition,
-- the oldest of them: every view reflects at least that much of the log. Each advance of the
-- pipeline's frontier, and of the views' frontier, is appended to the progress stream: a
-- subscriber of a view follows the frontier of the pipeline that writes it. (A batch that
-- changed rows without advancing it, timers or a watermark's evictions, appends nothing: a
-- gateway on a store cluster, which waits on this stream alone, sees its deltas at its next
-- read, within its wait's timeout.)
-- The log's heads come in ARGV, not as keys: on a cluster the log's partitions live in other
-- slots than the control keys, and no script spans slots.
-- Returns the pipeline's frontier as JSON, or false when the batch was applied before.
local frontiers, batches, progress = KEYS[1], KEYS[2], KEYS[3]
local active, history, lags = KEYS[4], KEYS[5], KEYS[6]
local pipeline, batch, combined = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local rows, npipes = ARGV[4], tonumber(ARGV[5])
local first_pair = 6 + npipes

local last = redis.call('HGET', batches, pipeline)
if last and tonumber(last) >= batch then
  return false
end

local function position(id)  -- an entry id <ms>-<seq>, or a Kafka log's <n> as <n>-0
  local first, seq = string.match(id, '^(%d+)-(%d+)$')
  if first then return tonumber(first), tonumber(seq) end
  return tonumber(id), 0
end

local function later(a, b)  -- is position a after position b?
  local ams, aseq = position(a)
  local bms, bseq = position(b)
  if ams ~= bms then return ams > bms end
  return aseq > bseq
end

local function decode(raw)
  if raw then return cjson.decode(raw) end
  return {}
end

local frontier = decode(redis.call('HGET', frontiers, pipeline))
local before = decode(redis.call('HGET', frontiers, combined))
local advanced = false
for i = first_pair, #ARGV, 3 do
  local partition, id = ARGV[i], ARGV[i + 1]
  if frontier[partition] == nil or later(id, frontier[partition]) then
    frontier[partition] = id
    advanced = true
  end
end
-- How far behind the log's head this batch left the views, in ms of append time: what a
-- client is told with each frontier (0 once caught up). Entry ids only: a Kafka log's
-- positions hold no time, so its sink passes no lag hash and no lag is recorded (a frame then
-- carries none, rather than a 0 that would say the views are caught up).
local lag = nil
if lags then
  lag = 0
  for i = first_pair, #ARGV, 3 do
    local head = ARGV[i + 2]
    local at = frontier[ARGV[i]]
    local hms = string.match(head, '^(%d+)-%d+$')
    local ams = at and string.match(at, '^(%d+)-%d+$')
    if hms and ams and later(head, at) then
      hms, ams = tonumber(hms), tonumber(ams)
      if hms - ams > lag then lag = hms - ams end
    end
  end
  redis.call('HSET', lags, pipeline, lag)
end
local encoded = cjson.encode(frontier)
redis.call('HSET', batches, pipeline, batch)
redis.call('HSET', frontiers, pipeline, encoded)
-- Which batch reflected which offsets, for reading a view as of an offset (liveviews inspect).
redis.call('XADD', history, 'MAXLEN', '~', 100000, '*', 'batch', batch, 'frontier', encoded)
if advanced then
  local entry = {'pipeline', pipeline, 'batch', batch, 'frontier', encoded, 'rows', rows}
  if lag then
    entry[#entry + 1], entry[#entry + 2] = 'lag_ms', lag
  end
  redis.call('XADD', progress, 'MAXLEN', '~', 1000, '*', unpack(entry))
end

-- The views' frontier: per partition, the oldest offset over every serving pipeline version.
local oldest = {}
local first = true
for i = 6, 5 + npipes do
  local name = ARGV[i] .. (redis.call('HGET', active, ARGV[i]) or '')
  local other = name == pipeline and frontier or decode(redis.call('HGET', frontiers, name))
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
