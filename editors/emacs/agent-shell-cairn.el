;;; agent-shell-cairn.el --- cairn for agent-shell -*- lexical-binding: t; -*-

;;; Commentary:
;; Needs Emacs 29.1 or newer, as agent-shell does.
;; Load this after agent-shell (which brings acp.el), then M-x agent-shell-cairn-start.
;; agent-shell starts `cairn acp' and speaks ACP with it on stdio.  cairn's stderr is plain
;; text and quiet, so agent-shell's error events stay empty unless something is wrong.

;;; Code:

(require 'agent-shell)

(defcustom agent-shell-cairn-environment
  (agent-shell-make-environment-variables "CAIRN_MODEL" "openai/gpt-5")
  "Environment variables for cairn (keys may also come from `cairn login')."
  :type '(repeat string)
  :group 'agent-shell)

(defun agent-shell-cairn-make-agent-config ()
  "The agent-shell configuration of cairn."
  (agent-shell-make-agent-config
   :identifier 'cairn
   :mode-line-name "cairn"
   :buffer-name "cairn"
   :shell-prompt "cairn> "
   :shell-prompt-regexp "cairn> "
   :client-maker (lambda (buffer)
                   (agent-shell--make-acp-client :command "cairn"
                                                 :command-params '("acp")
                                                 :environment-variables agent-shell-cairn-environment
                                                 :context-buffer buffer))
   :install-instructions "Install cairn with: cargo install --locked --path . (from its repository)"))

(defun agent-shell-cairn-start ()
  "Start a cairn agent shell."
  (interactive)
  (agent-shell--dwim :config (agent-shell-cairn-make-agent-config) :new-shell t))

(provide 'agent-shell-cairn)

;;; agent-shell-cairn.el ends here
