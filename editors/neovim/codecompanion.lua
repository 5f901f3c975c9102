-- cairn as a CodeCompanion ACP adapter (Neovim 0.11 or newer, CodeCompanion with ACP support).
-- Put this in your CodeCompanion setup; `:CodeCompanionChat` then offers the `cairn` adapter.
-- The adapter is built on CodeCompanion's generic ACP adapter (the Gemini one), with cairn's
-- command: CodeCompanion starts `cairn acp` and speaks ACP with it on stdio.
require("codecompanion").setup({
  adapters = {
    acp = {
      cairn = function()
        return require("codecompanion.adapters").extend("gemini_cli", {
          name = "cairn",
          formatted_name = "cairn",
          commands = {
            default = { "cairn", "acp" },
          },
          defaults = {
            -- Keys come from the environment Neovim was started in, or from `cairn login`.
            auth_method = "environment",
            mcpServers = {},
            timeout = 20000,
          },
          env = {
            CAIRN_MODEL = "openai/gpt-5",
          },
        })
      end,
    },
  },
  strategies = {
    chat = { adapter = "cairn" },
  },
})
