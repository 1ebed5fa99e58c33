-- Apply part of one micro-batch's row changes to one change-topic shard, exactly once.
--
-- A call holds all of the batch's changes for each (view, key) it names; a shard's changes
-- may take several calls, of which only the last (final = 1) records the batch id. A call
-- replayed after a crash emits nothing twice: an upsert of the stored value and a delete of
-- a missing row change nothing, so they append no delta.
--
-- KEYS[1] changes stream, KEYS[2] batches hash, KEYS[3] positions hash,
-- then three keys per (view, key) group: rows hash, candidates hash, rank zset.
-- ARGV: pipeline, batch id, retention, final (0 | 1), group count,
--       then per group: view, key, limit (0 = all rows), op count,
--       then per op: kind ("u" upsert | "d" delete), row id, value JSON, score.
-- Returns the number of deltas appended.
local changes, batches, positions = KEYS[1], KEYS[2], KEYS[3]
local pipeline, batch, retention = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local final, groups = ARGV[4] == '1', tonumber(ARGV[5])

local last = redis.call('HGET', batches, pipeline)
if last and tonumber(last) >= batch then
  return 0  -- this batch was applied before a crash; replaying it changes nothing
end

local function upsert(row, value)
  return '{"op":"upsert","row":' .. cjson.encode(row) .. ',"value":' .. value .. '}'
end
local function delete(row)
  return '{"op":"delete","row":' .. cjson.encode(row) .. '}'
end

local emitted, a, k = 0, 6, 4
for _ = 1, groups do
  local view, key, limit, nops = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  a = a + 4
  local rows, cand, rank = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  k = k + 3
  local ops = {}
  if limit == 0 then
    for _ = 1, nops do
      local kind, row, value = ARGV[a], ARGV[a + 1], ARGV[a + 2]
      a = a + 4
      local old = redis.call('HGET', rows, row)
      if kind == 'd' then
        if old then
          redis.call('HDEL', rows, row)
          ops[#ops + 1] = delete(row)
        end
      elseif old ~= value then
        redis.call('HSET', rows, row, value)
        ops[#ops + 1] = upsert(row, value)
      end
    end
  else
    local before = redis.call('ZREVRANGE', rank, 0, limit - 1)
    local touched = {}
    for _ = 1, nops do
      local kind, row, value, score = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
      a = a + 4
      touched[row] = true
      if kind == 'd' then
        redis.call('ZREM', rank, row)
        redis.call('HDEL', cand, row)
      else
        redis.call('ZADD', rank, score, row)
        redis.call('HSET', cand, row, value)
      end
    end
    local was = {}
    for _, row in ipairs(before) do
      was[row] = true
    end
    local after = {}
    for _, row in ipairs(redis.call('ZREVRANGE', rank, 0, limit - 1)) do
      after[row] = true
      -- A row that stays in the top rows and that this call did not change is already in the
      -- view as it is among the candidates: only rows that enter or change are compared.
      if touched[row] or not was[row] then
        local value = redis.call('HGET', cand, row)
        if redis.call('HGET', rows, row) ~= value then
          redis.call('HSET', rows, row, value)
          ops[#ops + 1] = upsert(row, value)
        end
      end
    end
    for _, row in ipairs(before) do
      if not after[row] then
        redis.call('HDEL', rows, row)
        ops[#ops + 1] = delete(row)
      end
    end
  end
  if #ops > 0 then
    local id = redis.call('XADD', changes, 'MAXLEN', '~', retention, '*',
      'view', view, 'key', key, 'ops', '[' .. table.concat(ops, ',') .. ']',
      'pipeline', pipeline, 'batch', batch)
    redis.call('HSET', positions, view .. '/' .. key, id)
    emitted = emitted + 1
  end
end
if final then
  redis.call('HSET', batches, pipeline, batch)
end
return emitted
