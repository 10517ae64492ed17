//! Registries mapping C handle values to the objects they name.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Live objects of one kind, by handle value (the address of the object).
pub struct Registry<T> {
    map: Mutex<Option<HashMap<usize, Arc<T>>>>,
}

impl<T> Registry<T> {
    pub const fn new() -> Self {
        Registry {
            map: Mutex::new(None),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut HashMap<usize, Arc<T>>) -> R) -> R {
        let mut g = self.map.lock().unwrap_or_else(|e| e.into_inner());
        f(g.get_or_insert_with(HashMap::new))
    }

    /// Registers `obj`; returns its handle value (never 0, 1 or 2: those are stream sentinels).
    pub fn insert(&self, obj: Arc<T>) -> usize {
        let h = Arc::as_ptr(&obj) as *const u8 as usize;
        self.with(|m| m.insert(h, obj));
        h
    }

    pub fn get(&self, h: usize) -> Option<Arc<T>> {
        self.with(|m| m.get(&h).cloned())
    }

    pub fn remove(&self, h: usize) -> Option<Arc<T>> {
        self.with(|m| m.remove(&h))
    }

    /// All live objects (for tests and the table of everything).
    #[allow(dead_code)]
    pub fn len(&self) -> usize {
        self.with(|m| m.len())
    }
}
