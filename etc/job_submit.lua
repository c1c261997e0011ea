--[[
teiresias job_submit plugin (JobSubmitPlugins=lua; this file goes next to
slurm.conf as job_submit.lua; `teiresias cluster up --job-submit-lua FILE`
installs it on the local cluster).

Why: the teiresias controller, not Slurm's own scheduler, decides when and
where a job of a managed partition starts. Every such job is therefore held
at submission (priority 0, Reason=JobHeldUser, AdminComment=teiresias:held);
the controller releases it with a node list when the policy starts it. A job
submitted held (sbatch -H) stays the submitter's: not marked, never released
by the controller. Plain `sbatch` users are managed
too. Jobs of other partitions are untouched.

Keep MANAGED in step with `partitions:` in teiresias.yaml.
--]]

local MANAGED = { gpu = true }
-- A job submitted without -p lands in the default partition: is it managed?
local DEFAULT_PARTITION_MANAGED = true

local function is_managed(partition)
   if partition == nil or partition == "" then
      return DEFAULT_PARTITION_MANAGED
   end
   for p in string.gmatch(partition, "[^,]+") do
      if MANAGED[p] then
         return true
      end
   end
   return false
end

-- Only GPU jobs are scheduled by teiresias; CPU-only jobs are left to Slurm.
-- What a GPU job is must match the controller (slurm_plugin/backends/parse.py
-- gres_count): a positive GPU count in gpu, gpu:N or gpu:TYPE:N entries
-- ("gres:" / "gres/" prefixes allowed). gpu:0 asks for no GPU: a CPU job.
-- A count that is not a whole number (gpu:-1, gpu:abc, gpu:1.5) is refused:
-- Slurm would keep such a job pending forever. gpu:TYPE without a count is
-- refused too: it cannot be told from a mistyped count.

-- GPUs one tres_per_* string asks for, or nil and the offending entry.
local function gpu_count(spec)
   local total = 0
   for item in string.gmatch(spec, "[^,]+") do
      local s = string.gsub(item, "%b()", "")
      s = string.gsub(s, "^gres[:/]", "")
      s = string.gsub(s, "=", ":")
      local fields = {}
      for f in string.gmatch(s, "[^:]+") do
         fields[#fields + 1] = f
      end
      -- shard:N (a share of one GPU, docs/sjf-bsbf.md) is a GPU request too.
      if fields[1] == "gpu" or fields[1] == "shard" then
         if #fields == 1 then
            total = total + 1
         elseif #fields <= 3 and string.match(fields[#fields], "^%d+$") then
            total = total + tonumber(fields[#fields])
         else
            return nil, item
         end
      end
   end
   return total
end

-- GPUs asked for over all tres_per_* fields, or nil and the offending entry.
local function wanted_gpus(job_desc)
   local total = 0
   for _, field in ipairs({ "tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket" }) do
      local v = job_desc[field]
      if v ~= nil and v ~= "" then
         local n, bad = gpu_count(v)
         if n == nil then
            return nil, bad
         end
         total = total + n
      end
   end
   return total
end

-- The controller's word that a hold is its own (slurm_plugin/backends/base.py HOLD_MARK).
local HOLD_MARK = "teiresias:held"
-- Where an untyped shard request is kept (slurm_plugin/backends/gputypes.py SHARD_STASH).
local SHARD_STASH = "teiresias:shard="

-- Slurm 22.05 puts an untyped --gres=shard:N job on the lowest GPU index with N free
-- shards (first fit) and cannot give a pending job a GPU type later; a job that asks
-- no gres can be given one. So an untyped shard request is taken off the held job and
-- kept in its AdminComment; the controller releases it with the per-GPU type of the
-- GPU the plan chose (shard:g2:N), or untyped again on nodes without per-GPU types
-- (docs/gandiva.md "Which GPU a shard job gets"). Returns the count taken, or nil.
local function stash_shards(job_desc)
   local spec = job_desc.tres_per_node
   if spec == nil or spec == "" then
      return nil
   end
   local keep, taken = {}, nil
   for item in string.gmatch(spec, "[^,]+") do
      local s = string.gsub(item, "^gres[:/]", "")
      local count = string.match(s, "^shard:(%d+)$")
      if s == "shard" then
         count = "1"
      end
      if count ~= nil then
         taken = (taken or 0) + tonumber(count)
      else
         keep[#keep + 1] = item
      end
   end
   if taken ~= nil then
      job_desc.tres_per_node = table.concat(keep, ",")
   end
   return taken
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if not is_managed(job_desc.partition) then
      return slurm.SUCCESS
   end
   local gpus, bad = wanted_gpus(job_desc)
   if gpus == nil then
      slurm.log_user("teiresias: GPU request '%s' has no whole GPU count; ask for --gpus=N, " ..
                     "--gres=gpu:N or --gres=gpu:TYPE:N with N >= 1", bad)
      return slurm.ERROR
   end
   if gpus == 0 then
      return slurm.SUCCESS
   end
   if job_desc.priority == 0 then
      -- sbatch -H (or --priority=0 by an operator): the submitter's own hold.
      -- Left as it is and unmarked, so the controller never releases it.
      return slurm.SUCCESS
   end
   -- priority 0 = held; the mark tells the controller this hold is its own.
   job_desc.priority = 0
   local mark = HOLD_MARK
   local shards = stash_shards(job_desc)
   if shards ~= nil then
      mark = mark .. ";" .. SHARD_STASH .. tostring(shards)
   end
   if job_desc.admin_comment == nil or job_desc.admin_comment == "" then
      job_desc.admin_comment = mark
   else
      job_desc.admin_comment = job_desc.admin_comment .. ";" .. mark
   end
   slurm.log_info("teiresias: held job %s of uid %u for the controller",
                  tostring(job_desc.name), submit_uid)
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

slurm.log_info("teiresias: job_submit.lua loaded")
return slurm.SUCCESS
