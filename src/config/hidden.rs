//! The places in the home directory that sandboxed commands never see: keys, credentials, the
//! tokens package managers' and services' `login` commands write, browser profiles. The
//! process policy (`process.rs`) covers each in the command's namespace; `[sandbox] visible`
//! takes one back.

use std::path::{Path, PathBuf};

/// What local commands never see, relative to the home directory: keys, credentials, tokens,
/// browser profiles.
pub(super) const HIDDEN_IN_HOME: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".gnupg",
    ".kube",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".config/gcloud",
    ".docker/config.json",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".pypirc",
    ".password-store",
    ".local/share/keyrings",
    ".terraform.d/credentials.tfrc.json",
    // What package managers' and services' `login` commands write: tokens, in files that also
    // hold settings (a registry, a mirror), which commands then go without.
    ".npmrc",
    ".yarnrc.yml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".config/pypoetry/auth.toml",
    ".config/composer/auth.json",
    ".composer/auth.json",
    ".nuget/NuGet/NuGet.Config",
    ".config/NuGet/NuGet.Config",
    ".gradle/gradle.properties",
    ".vault-token",
    ".config/glab-cli",
    ".config/doctl",
    ".config/hcloud",
    ".config/heroku",
    ".config/op",
    ".config/rclone",
    ".config/gitlab",
    ".cache/huggingface/token",
    ".huggingface/token",
    ".fly",
    ".pgpass",
    ".my.cnf",
    ".oci",
    ".s3cfg",
    ".boto",
    ".databrickscfg",
    ".config/anthropic",
    ".config/openai",
    // Other agents' and editors' own logins.
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".gemini/oauth_creds.json",
    ".config/github-copilot",
    ".pulumi/credentials.json",
    ".config/sops/age",
    ".local/share/uv/credentials",
    ".config/containers/auth.json",
    ".config/stripe",
    ".dbt/profiles.yml",
    ".config/configstore",
    ".wrangler",
    ".config/.wrangler",
    ".local/share/com.vercel.cli",
    ".supabase/access-token",
    ".terraformrc",
    ".config/pip/pip.conf",
    ".pip/pip.conf",
    ".config/gopass",
    ".snowflake",
    ".railway",
    ".sentryclirc",
    ".local/share/pnpm/rc",
    // Shell and REPL histories: a token typed by hand stays there.
    ".bash_history",
    ".zsh_history",
    ".local/share/fish/fish_history",
    ".psql_history",
    ".mysql_history",
    ".python_history",
    ".node_repl_history",
    // git's credential cache daemon answers its socket with the user's tokens.
    ".cache/git/credential",
    ".git-credential-cache",
    // A Jupyter kernel's connection file holds the key that makes it run code.
    ".local/share/jupyter/runtime",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".var/app/org.mozilla.firefox",
    "snap/firefox",
];

/// Where the user's variables move what [`HIDDEN_IN_HOME`] names (`XDG_CONFIG_HOME`,
/// `XDG_DATA_HOME`, `XDG_CACHE_HOME`), and the secrets variables point at themselves
/// (`GNUPGHOME`, `DOCKER_CONFIG`, `KUBECONFIG`, `AWS_SHARED_CREDENTIALS_FILE`,
/// `GOOGLE_APPLICATION_CREDENTIALS`, …): every place to hide, the home's own included.
pub(super) fn home_secrets(home: Option<&Path>, lookup: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let absolute = |name: &str| lookup(name).map(PathBuf::from).filter(|path| path.is_absolute());
    let mut found: Vec<PathBuf> =
        home.iter().flat_map(|home| HIDDEN_IN_HOME.iter().map(|rest| home.join(rest))).collect();
    for (prefix, variable) in
        [(".config/", "XDG_CONFIG_HOME"), (".local/share/", "XDG_DATA_HOME"), (".cache/", "XDG_CACHE_HOME")]
    {
        let Some(base) = absolute(variable) else { continue };
        found.extend(HIDDEN_IN_HOME.iter().filter_map(|rest| rest.strip_prefix(prefix)).map(|rest| base.join(rest)));
    }
    for variable in [
        "GNUPGHOME",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
        "AZURE_CONFIG_DIR",
        "CLOUDSDK_CONFIG",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GH_CONFIG_DIR",
        "PASSWORD_STORE_DIR",
        "NPM_CONFIG_USERCONFIG",
        "HF_TOKEN_PATH",
        "VAULT_CONFIG_PATH",
    ] {
        found.extend(absolute(variable));
    }
    found.extend(absolute("DOCKER_CONFIG").map(|dir| dir.join("config.json")));
    found.extend(absolute("HF_HOME").map(|dir| dir.join("token")));
    if let Some(files) = lookup("KUBECONFIG") {
        found.extend(std::env::split_paths(&files).filter(|path| path.is_absolute()));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_hidden_where_the_users_variables_move_them() {
        let vars = [
            ("XDG_CONFIG_HOME", "/dots/config"),
            ("XDG_CACHE_HOME", "/dots/cache"),
            ("GNUPGHOME", "/dots/gnupg"),
            ("DOCKER_CONFIG", "/dots/docker"),
            ("KUBECONFIG", "/dots/kube/a:/dots/kube/b:relative"),
            ("XDG_DATA_HOME", "relative"),
        ];
        let lookup = |name: &str| vars.iter().find(|(known, _)| *known == name).map(|(_, value)| (*value).to_owned());
        let found = home_secrets(Some(Path::new("/home/u")), &lookup);
        for hidden in [
            "/home/u/.ssh",
            "/home/u/.claude/.credentials.json",
            "/home/u/.bash_history",
            "/dots/config/gh",
            "/dots/config/github-copilot",
            "/dots/cache/huggingface/token",
            "/dots/gnupg",
            "/dots/docker/config.json",
            "/dots/kube/a",
            "/dots/kube/b",
        ] {
            assert!(found.contains(&PathBuf::from(hidden)), "{hidden}");
        }
        assert!(!found.iter().any(|path| path.starts_with("relative")), "relative values are not places");
    }
}
