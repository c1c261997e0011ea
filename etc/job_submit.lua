--[[
teiresias job_submit plugin (JobSubmitPlugins=lua; this file goes next to
slurm.conf as job_submit.lua; `teiresias cluster up --job-submit-lua FILE`
installs it on the local cluster).

Why: the teiresias controller, not Slurm's own scheduler, decides when and
where a job of a managed partition starts. Every such job is therefore held
at submission (priority 0, Reason=JobHeldAdmin); the controller releases it
with a node list when the policy starts it. Plain `sbatch` users are managed
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
local function wants_gpus(job_desc)
   for _, field in ipairs({ "tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket" }) do
      local v = job_desc[field]
      if v ~= nil and string.find(v, "gpu", 1, true) then
         return true
      end
   end
   return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if is_managed(job_desc.partition) and wants_gpus(job_desc) then
      -- priority 0 = held; only an operator (the controller) can release it.
      job_desc.priority = 0
      slurm.log_info("teiresias: held job %s of uid %u for the controller",
                     tostring(job_desc.name), submit_uid)
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

slurm.log_info("teiresias: job_submit.lua loaded")
return slurm.SUCCESS
