//! The configuration as a whole: environment over file over defaults, the sections read
//! together, and the refusals of a bad setting naming it (each section's own checks are tested
//! in its file).

use super::*;

fn config_with(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Config::from_env(&move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
}

#[test]
fn env_overrides_file_and_bare_models_belong_to_openai() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(
        &file,
        "model = \"ollama/qwen3\"\nhome = \"/from/file\"\n[providers.ollama]\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodels = [\"qwen3\", \"llama3\"]\n[limits]\nretries = 5\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let config = config_with(&[("CAIRN_CONFIG", path)]).unwrap();
    assert_eq!(config.model, "ollama/qwen3");
    assert_eq!(config.data_dir, PathBuf::from("/from/file"));
    assert_eq!(config.limits.retries, 5);
    assert_eq!(config.providers["ollama"].api_key_env, None);
    assert!(config.models().contains(&"ollama/llama3".to_owned()));

    let config = config_with(&[
        ("CAIRN_CONFIG", path),
        ("CAIRN_MODEL", "gpt-4.1"),
        ("CAIRN_HOME", "/from/env"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
    ])
    .unwrap();
    assert_eq!(config.model, "openai/gpt-4.1");
    assert_eq!(config.data_dir, PathBuf::from("/from/env"));
    assert_eq!(config.providers["openai"].base_url, "http://127.0.0.1:9/v1");
}

#[test]
fn sandbox_and_tools_tables_are_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, "").unwrap();
    let path = file.to_str().unwrap();
    let config = config_with(&[("CAIRN_CONFIG", path), ("CAIRN_HOME", "/x")]).unwrap();
    assert_eq!(config.process.sandbox, crate::process::SandboxMode::WorkspaceWrite, "the default");
    assert!(config.process.network);
    std::fs::write(
        &file,
        "[sandbox]\nmode = \"read-only\"\nnetwork = false\nwritable = [\"~/.cache\"]\n[tools]\nenv_passthrough = [\"OPENAI_API_KEY\"]\nimage_max_bytes = 1000\n",
    )
    .unwrap();
    let config =
        config_with(&[("CAIRN_CONFIG", path), ("CAIRN_HOME", "/x"), ("HOME", "/home/u"), ("TMPDIR", "/scratch")])
            .unwrap();
    assert_eq!(config.process.sandbox, crate::process::SandboxMode::ReadOnly);
    assert!(!config.process.network);
    assert!(config.process.writable.contains(&PathBuf::from("/home/u/.cache")));
    assert!(config.process.writable.contains(&PathBuf::from("/scratch")));
    assert!(!config.process.env.remove.iter().any(|name| name == "OPENAI_API_KEY"));
    assert_eq!(config.limits.image_max_bytes, 1000);
    let bad = ["[sandbox]\nwritable = [\"cache\"]\n", "[sandbox]\nmode = \"none\"\n", "[tools]\npass = []\n"];
    for bad in bad.into_iter().chain(["[tools]\nimage_max_bytes = 0\n"]) {
        std::fs::write(&file, bad).unwrap();
        assert!(config_with(&[("CAIRN_CONFIG", path), ("CAIRN_HOME", "/x")]).is_err(), "{bad}");
    }
    std::fs::write(&file, "[tools]\nimage_max_bytes = 0\n").unwrap();
    let refused = config_with(&[("CAIRN_CONFIG", path), ("CAIRN_HOME", "/x")]).unwrap_err().to_string();
    assert!(refused.contains("[tools] image_max_bytes must be more than 0"), "{refused}");
    std::fs::write(&file, "[tools]\nimage_max_bytes = 16777216\n").unwrap();
    let refused = config_with(&[("CAIRN_CONFIG", path), ("CAIRN_HOME", "/x")]).unwrap_err().to_string();
    assert!(refused.contains("is more than one turn may read (15728640"), "{refused}");
    std::fs::write(&file, "").unwrap();
    let default = config_with(&[("CAIRN_CONFIG", path), ("CAIRN_HOME", "/x")]).unwrap();
    assert_eq!(default.limits.image_max_bytes, 3_932_160, "5 MiB once base64");
}

#[test]
fn a_relative_config_file_is_found_from_where_cairn_starts_and_a_relative_home_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cairn.toml"), "").unwrap();
    let here = std::env::current_dir().unwrap();
    let up = "../".repeat(here.components().count() - 1);
    let relative = format!("{up}{}", dir.path().join("cairn.toml").display().to_string().trim_start_matches('/'));
    let config = config_with(&[("CAIRN_CONFIG", &relative), ("CAIRN_HOME", "/x")]).unwrap();
    assert_eq!(config.file.as_deref().map(std::path::Path::is_absolute), Some(true));
    assert!(config.config_dir.is_some_and(|dir| dir.is_absolute()), "not the empty path, which would protect `/`");

    let err = config_with(&[("CAIRN_CONFIG", &relative), ("CAIRN_HOME", "data")]).unwrap_err().to_string();
    assert!(err.starts_with("CAIRN_HOME: `data` is relative"), "{err}");
    let err = config_with(&[("CAIRN_CONFIG", "/nonexistent/cairn.toml")]).unwrap_err().to_string();
    assert!(err.starts_with("CAIRN_CONFIG: /nonexistent/cairn.toml does not exist"), "{err}");
    let err = config_with(&[("CAIRN_CONFIG", &relative), ("CAIRN_HOME", "/x"), ("CAIRN_MODEL", "openai/")])
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("CAIRN_MODEL: "), "{err}");
    let err = config_with(&[("CAIRN_CONFIG", &relative), ("CAIRN_HOME", "/x"), ("OPENAI_BASE_URL", "api.openai.com")])
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("OPENAI_BASE_URL: `api.openai.com` has no http:// or https:// scheme"), "{err}");
    std::fs::write(dir.path().join("cairn.toml"), "[providers.local]\nbase_url = \"localhost:8080\"\n").unwrap();
    let err = config_with(&[("CAIRN_CONFIG", &relative), ("CAIRN_HOME", "/x")]).unwrap_err().to_string();
    assert!(err.starts_with("[providers.local] base_url: "), "{err}");
}

#[test]
fn a_typo_in_the_file_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, "modle = \"x\"\n").unwrap();
    let err = config_with(&[("CAIRN_CONFIG", file.to_str().unwrap()), ("CAIRN_HOME", "/x")]).unwrap_err();
    assert!(err.to_string().contains("modle"), "{err}");
}

#[test]
fn where_always_is_remembered_is_read_and_a_bad_value_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let path = file.to_str().unwrap();
    std::fs::write(&file, "").unwrap();
    assert_eq!(config_with(&[("CAIRN_CONFIG", path), ("CAIRN_HOME", "/x")]).unwrap().remember, Remember::Session);
    std::fs::write(&file, "[permissions]\nremember = \"project\"\n").unwrap();
    assert_eq!(config_with(&[("CAIRN_CONFIG", path), ("CAIRN_HOME", "/x")]).unwrap().remember, Remember::Project);
    std::fs::write(&file, "[permissions]\nremember = \"always\"\n").unwrap();
    let err = config_with(&[("CAIRN_CONFIG", path), ("CAIRN_HOME", "/x")]).unwrap_err().to_string();
    assert!(
        err.contains("config.toml") && err.contains("[permissions] remember = \"always\" is not a choice"),
        "{err}"
    );
}

#[test]
fn only_openais_own_server_gets_the_prompt_cache_key_unasked() {
    let config = config_with(&[("CAIRN_HOME", "/h")]).unwrap();
    assert!(config.providers["openai"].prompt_cache_key && config.providers["openai-responses"].prompt_cache_key);
    assert!(!config.providers["anthropic"].prompt_cache_key);
    let elsewhere = config_with(&[("CAIRN_HOME", "/h"), ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]).unwrap();
    assert!(!elsewhere.providers["openai"].prompt_cache_key, "a compatible server may refuse the field");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, "[providers.openai]\nprompt_cache_key = true\n").unwrap();
    let path = file.to_str().unwrap();
    let told =
        config_with(&[("CAIRN_HOME", "/h"), ("CAIRN_CONFIG", path), ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")]);
    assert!(told.unwrap().providers["openai"].prompt_cache_key);
}
