(class_declaration
  name: (type_identifier) @name.definition.class
  body: (class_body) @body) @definition.class

(abstract_class_declaration
  name: (type_identifier) @name.definition.class
  body: (class_body) @body) @definition.class

(interface_declaration
  name: (type_identifier) @name.definition.interface
  body: (_) @body) @definition.interface

(type_alias_declaration
  name: (type_identifier) @name.definition.type) @definition.type

(enum_declaration
  name: (identifier) @name.definition.enum
  body: (enum_body) @body) @definition.enum

(function_declaration
  name: (identifier) @name.definition.function
  body: (statement_block) @body) @definition.function

(generator_function_declaration
  name: (identifier) @name.definition.function
  body: (statement_block) @body) @definition.function

(function_signature
  name: (identifier) @name.definition.function) @definition.function

(method_definition
  name: (property_identifier) @name.definition.method
  body: (statement_block) @body) @definition.method

(method_signature
  name: (property_identifier) @name.definition.method) @definition.method

(abstract_method_signature
  name: (property_identifier) @name.definition.method) @definition.method

(module
  name: (_) @name.definition.module
  body: (statement_block) @body) @definition.module

(internal_module
  name: (_) @name.definition.module
  body: (statement_block) @body) @definition.module

(lexical_declaration
  (variable_declarator
    name: (identifier) @name.definition.function
    value: [(arrow_function body: (_) @body) (function_expression body: (_) @body)])) @definition.function
