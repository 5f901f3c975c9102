-- cairn as a CodeCompanion ACP adapter (Neovim 0.11 or newer, CodeCompanion with ACP support).
-- Put this in your CodeCompanion setup; `:CodeCompanionChat` then offers the `cairn` adapter.
-- The adapter is a whole ACP adapter of its own, not an extension of another agent's (which
-- would bring that agent's commands, such as a `yolo` one launching it, and its key variables):
-- CodeCompanion starts `cairn acp` and speaks ACP with it on stdio, forming the messages with its
-- own ACP helpers. cairn needs no sign-in method: keys come from the environment Neovim was
-- started in, or from `cairn login`.
require("codecompanion").setup({
  adapters = {
    acp = {
      cairn = function()
        return {
          name = "cairn",
          formatted_name = "cairn",
          type = "acp",
          roles = { llm = "assistant", user = "user" },
          opts = { vision = true },
          commands = {
            default = { "cairn", "acp" },
          },
          defaults = {
            mcpServers = {},
            timeout = 20000,
          },
          env = {
            CAIRN_MODEL = "openai/gpt-5",
          },
          parameters = {
            protocolVersion = 1,
            clientCapabilities = { fs = { readTextFile = true, writeTextFile = true } },
            clientInfo = { name = "CodeCompanion.nvim", version = "1.0.0" },
          },
          handlers = {
            setup = function(_)
              return true
            end,
            form_messages = function(self, messages, capabilities)
              return require("codecompanion.adapters.acp.helpers").form_messages(self, messages, capabilities)
            end,
            on_exit = function(_, _) end,
          },
        }
      end,
    },
  },
  strategies = {
    chat = { adapter = "cairn" },
  },
})
